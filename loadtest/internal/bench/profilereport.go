package bench

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sundialmq/sundial/loadtest/internal/target"
)

// windowText says what each scenario's profiled window covers.
var windowText = map[string]string{
	Throughput: "the publish window (the producers' start to the last publish's answer)",
	Burst:      "the drain window (the first delivery to the last)",
	Precision:  "the steady window (the first message due to the last send)",
}

// windowMessages says which messages a window's per-1M figures divide by.
var windowMessages = map[string]string{
	Throughput: "the messages published",
	Burst:      "the messages delivered",
	Precision:  "the rate × the window",
}

// profileTable writes the scenario's "where the CPU went" table and its
// fsync line, when any run of it was profiled.
func (rep Report) profileTable(w io.Writer, scenario string) {
	var runs []Run
	for _, r := range rep.runs(scenario) {
		if r.Profile != nil {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "### Where Sundial's CPU went (profiles of this run)\n\n")
	fmt.Fprintf(w, "CPU profiles of every broker and of the proxy over %s, fetched from their `/debug/pprof/profile` at the same time as back-to-back 1 s profiles (the last one runs past the window's end by under a second), at pprof's default 100 Hz, which adds about 1%% CPU. Each sample goes to the first frame from the leaf up that a rule in `loadtest/internal/bench/classify.go` matches (a Pebble write made by apply is *Pebble writes*; GC assists are *GC*; every fsync syscall is *Raft log write + fsync*; network reads and writes are *syscalls (other)*; *Sundial (other)* is Sundial code outside the state machine and the dispatcher: the broker's service and proposer, the proxy's routing and batching). Shares are %% of the CPU seconds profiled; *brokers* is every broker together.\n\n", windowText[scenario])
	cells := []string{"System", "Process", "CPU s profiled"}
	for _, c := range Categories {
		cells = append(cells, categoryLabels[c])
	}
	header(w, cells...)
	for _, r := range runs {
		p := r.Profile
		if p.Error != "" {
			cells := []string{sundialLabel(r), "–", "– (" + p.Error + ")"}
			for range Categories {
				cells = append(cells, "–")
			}
			row(w, cells...)
			continue
		}
		for _, rp := range p.Roles {
			process := rp.Role
			if rp.Role == target.RoleBrokers {
				process = fmt.Sprintf("brokers (%d)", rp.Processes)
			}
			cells := []string{sundialLabel(r), process}
			if rp.CPU == nil {
				cells = append(cells, "– (fetch failed)")
				for range Categories {
					cells = append(cells, "–")
				}
				row(w, cells...)
				continue
			}
			cells = append(cells, fmt.Sprintf("%.1f", rp.CPU.Seconds))
			for _, c := range Categories {
				cells = append(cells, percent(rp.CPU.Share(c)))
			}
			row(w, cells...)
		}
	}
	fmt.Fprintln(w)
	var fsyncs []string
	for _, r := range runs {
		fsyncs = append(fsyncs, sundialLabel(r)+": "+fsyncCell(r.Profile))
	}
	fmt.Fprintf(w, "**Raft log fsyncs** over the same window (every broker's `%s` summed, after minus before; per 1M of %s; the mean from `%s`): %s.\n\n", FsyncsMetric, windowMessages[scenario], FsyncSecondsMetric, strings.Join(fsyncs, "; "))
}

// sundialLabel names a Sundial run in the profile table: its system and
// the configuration up to the replication factor ("Sundial 3 brokers, RF 3").
func sundialLabel(r Run) string {
	parts := strings.SplitN(r.Config, ", ", 3)
	return r.System + " " + strings.Join(parts[:min(2, len(parts))], ", ")
}

// percent renders a share as a percentage: one decimal below 10 %.
func percent(share float64) string {
	v := share * 100
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// fsyncCell renders a window's fsync figures.
func fsyncCell(p *WindowProfile) string {
	switch {
	case p.Error != "":
		return "–"
	case p.Fsync == nil:
		return "– (" + p.FsyncError + ")"
	}
	f := p.Fsync
	s := fmt.Sprintf("%s fsyncs in %.1f s, %s/s, %s per 1M msgs", count(uint64(f.Count+0.5)), p.Seconds, count(uint64(f.PerSecond+0.5)), count(uint64(f.PerMillion+0.5)))
	if f.MeanSeconds > 0 {
		s += fmt.Sprintf(", mean %.2f ms", f.MeanSeconds*1e3)
	} else {
		s += ", mean –"
	}
	return s
}

// profileSummary is a one-line account of a window for progress output:
// each role's CPU seconds and its three largest categories, then the
// fsyncs.
func profileSummary(p *WindowProfile) string {
	var parts []string
	for _, rp := range p.Roles {
		if rp.CPU == nil {
			parts = append(parts, rp.Role+" –")
			continue
		}
		top := slices.Clone(rp.CPU.Categories)
		slices.SortStableFunc(top, func(a, b CategorySeconds) int { return cmp.Compare(b.Seconds, a.Seconds) })
		var names []string
		for _, c := range top[:min(3, len(top))] {
			if c.Seconds > 0 {
				names = append(names, fmt.Sprintf("%s %s%%", categoryLabels[c.Category], percent(rp.CPU.Share(c.Category))))
			}
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s (%s)", rp.Role, rp.CPU.Seconds, strings.Join(names, ", ")))
	}
	return strings.Join(parts, "; ") + "; Raft log fsyncs " + fsyncCell(p)
}
