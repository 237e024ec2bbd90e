package command

import (
	"fmt"
	"io"
	"time"

	"github.com/jedib0t/go-pretty/v6/progress"
)

// step is the state of a long command (a backup, a restore) at one moment,
// as a meter shows it.
type step struct {
	label       string // what progresses: "backup 20300101T000000Z-0a1b2c"
	phase       string // a restore's phase (verify, shards, catalog, done); "" for a backup
	shardsDone  uint32
	shardsTotal uint32
	bytesDone   int64
	bytesTotal  int64 // 0 when unknown (a backup's)
}

// String is the step as one line: "backup 2030…: 3/8 shards, 12.3 MiB",
// "restore 2030…: verify 3/8 shards, 1.2 MiB of 40.0 MiB".
func (s step) String() string {
	phase := ""
	if s.phase != "" {
		phase = s.phase + " "
	}
	return fmt.Sprintf("%s: %s%s, %s", s.label, phase, s.shards(), s.bytes())
}

func (s step) shards() string { return fmt.Sprintf("%d/%d shards", s.shardsDone, s.shardsTotal) }

func (s step) bytes() string {
	if s.bytesTotal > 0 {
		return humanBytes(s.bytesDone) + " of " + humanBytes(s.bytesTotal)
	}
	return humanBytes(s.bytesDone)
}

// meter shows a long command's progress on stderr: a bar on a terminal
// (barMeter), a line whenever the shards done change otherwise
// (lineMeter), nothing with --no-progress.
type meter interface {
	show(s step)
	// end stops the display; ok false marks the last step failed.
	end(ok bool)
}

func newMeter(e *env, off bool) meter {
	switch {
	case off:
		return noMeter{}
	case isTerminal(e.stderr):
		return newBarMeter(e.stderr)
	}
	return &lineMeter{w: e.stderr}
}

type noMeter struct{}

func (noMeter) show(step) {}
func (noMeter) end(bool)  {}

// lineMeter writes a line for the first step and for each step whose
// label, phase or shard counts differ from the last line's (bytes alone do
// not make a line: a log holds one line per shard and phase at most).
type lineMeter struct {
	w    io.Writer
	last *step
}

func (m *lineMeter) show(s step) {
	if l := m.last; l != nil && l.label == s.label && l.phase == s.phase && l.shardsDone == s.shardsDone && l.shardsTotal == s.shardsTotal {
		return
	}
	m.last = &s
	fmt.Fprintln(m.w, s)
}

func (m *lineMeter) end(bool) {}

// barMeter draws a go-pretty progress bar per label and phase: in bytes
// when the step's total is known (a restore), else in shards with the
// bytes in its message (a backup). Its render goroutine runs from
// newBarMeter to end; show and end are called from one goroutine.
type barMeter struct {
	pw       progress.Writer
	rendered chan struct{} // closed when the render goroutine returns
	key      string        // label and phase of t
	t        *progress.Tracker
}

// barUpdateInterval is how often the bar is redrawn.
const barUpdateInterval = 100 * time.Millisecond

func newBarMeter(w io.Writer) *barMeter {
	pw := progress.NewWriter()
	pw.SetOutputWriter(w)
	pw.SetAutoStop(false)
	pw.SetTrackerLength(30)
	pw.SetMessageLength(60)
	pw.SetUpdateFrequency(barUpdateInterval)
	pw.Style().Visibility.ETA = true
	pw.Style().Visibility.Value = true
	m := &barMeter{pw: pw, rendered: make(chan struct{})}
	go func() {
		pw.Render()
		close(m.rendered)
	}()
	return m
}

// bytesUnits shows a tracker's bytes as humanBytes does (IEC, as the lines).
var bytesUnits = progress.Units{Formatter: humanBytes}

func (m *barMeter) show(s step) {
	total, value, units := int64(s.shardsTotal), int64(s.shardsDone), progress.UnitsDefault
	msg := s.label + ": " + s.bytes()
	if s.bytesTotal > 0 {
		total, value, units = s.bytesTotal, s.bytesDone, bytesUnits
		msg = s.label + ": " + s.shards()
	}
	if s.phase != "" {
		msg = s.label + ": " + s.phase + " " + s.shards()
	}
	if s.phase == "done" && m.t != nil {
		// The last phase's bar ends full; "done" needs no bar of its own.
		m.t.SetValue(m.t.Total)
		return
	}
	if key := s.label + " " + s.phase; m.t == nil || key != m.key {
		if m.t != nil {
			m.t.MarkAsDone()
		}
		m.t = &progress.Tracker{Message: msg, Total: total, Units: units, AutoStopDisabled: true}
		m.key = key
		m.pw.AppendTracker(m.t)
	}
	m.t.UpdateMessage(msg)
	m.t.UpdateTotal(total)
	m.t.SetValue(value)
}

func (m *barMeter) end(ok bool) {
	if m.t != nil {
		if ok {
			m.t.MarkAsDone()
		} else {
			m.t.MarkAsErrored()
		}
	}
	// Stop does nothing before Render has begun: ask until it returns.
	for {
		m.pw.Stop()
		select {
		case <-m.rendered:
			return
		case <-time.After(barUpdateInterval):
		}
	}
}

// humanBytes is n in B, KiB, MiB, GiB or TiB with one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}
