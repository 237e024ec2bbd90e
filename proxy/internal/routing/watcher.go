package routing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Reconnect backoff of the watch stream: capped at a second, so that the
// proxy learns the routing table within about a second of a broker coming
// back after any outage.
const (
	minWatchBackoff = 100 * time.Millisecond
	maxWatchBackoff = time.Second
)

// DefaultSuspectInterval is how long a broker the watcher gave up on for
// silence is watched only after every other broker.
const DefaultSuspectInterval = 30 * time.Second

// Clock is the watcher's time source: the real clock in production, a
// fake one in tests.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Seeds are the broker addresses watched first; the nodes of the
	// table follow them.
	Seeds []string
	// SilenceTimeout bounds how long a broker that sends progress frames
	// (RoutingTable.progress_interval_ms set) may stay silent on the watch
	// stream: then the watcher gives the stream up, marks the broker
	// suspect and watches another one, keeping its table meanwhile, and
	// Stale reports the watch stale. The watcher asks for a progress frame
	// every quarter of it; the bound is at least four of the intervals the
	// broker names. 0 asks for none: only gRPC keepalive (Keepalive*) ends
	// a stream on a frozen broker.
	SilenceTimeout time.Duration
	// SuspectInterval is how long a broker given up on for silence is
	// watched only after the others. 0 means DefaultSuspectInterval.
	SuspectInterval time.Duration
	// Clock is the time source; nil means the real clock.
	Clock Clock
}

// Watcher follows Cluster.WatchRouting on one broker at a time and keeps
// the newest table. When the stream fails, or stays silent past the
// silence bound, it reconnects with backoff to the next address: the seeds
// first, then every node address learned from the table, brokers it gave
// up on for silence lately last.
type Watcher struct {
	cfg     WatcherConfig
	clock   Clock
	pool    *Pool
	log     *zap.Logger
	metrics *Metrics
	onTable func(*Table)

	cur atomic.Pointer[Table]
	// lastFrame is the clock's time (unix ns) of the latest frame heard on
	// any watch stream, 0 before the first; bound is the silence bound of
	// the stream it came on, 0 for a broker that sends no progress frames.
	lastFrame atomic.Int64
	bound     atomic.Int64

	mu       sync.Mutex    // guards changed, watching
	changed  chan struct{} // closed (and replaced) whenever cur changes
	watching string        // the broker the latest stream was opened on

	cancel context.CancelFunc
	done   chan struct{}
}

// NewWatcher returns a watcher configured by cfg. onTable, if not nil, is
// called from the watcher goroutine after each new table is installed; it
// must not block.
func NewWatcher(cfg WatcherConfig, pool *Pool, log *zap.Logger, m *Metrics, onTable func(*Table)) *Watcher {
	if cfg.SuspectInterval <= 0 {
		cfg.SuspectInterval = DefaultSuspectInterval
	}
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	w := &Watcher{
		cfg:     cfg,
		clock:   clock,
		pool:    pool,
		log:     log,
		metrics: m.m(),
		onTable: onTable,
		changed: make(chan struct{}),
	}
	since := w.sinceFrame
	w.metrics.sinceFrame.Store(&since)
	return w
}

// Start launches the watch goroutine. It follows the routing table until
// ctx ends or Stop is called; a caller whose ctx bounds only its own start
// passes context.WithoutCancel(ctx).
func (w *Watcher) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(ctx)
	}()
}

// Stop ends the watch goroutine and waits for it.
func (w *Watcher) Stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
}

// Table is the newest table, nil before the first one arrived.
func (w *Watcher) Table() *Table { return w.cur.Load() }

// Changed returns a channel closed when the next table is installed.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// ErrNoTable is returned by Wait when ctx ends before any table arrived.
var ErrNoTable = status.Error(codes.Unavailable, "routing: no routing table received from any broker yet")

// Wait returns the current table, waiting for the first one until ctx ends.
func (w *Watcher) Wait(ctx context.Context) (*Table, error) {
	for {
		ch := w.Changed()
		if t := w.cur.Load(); t != nil {
			return t, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ErrNoTable
		}
	}
}

// Install makes rt the current table if it is not older than the current
// one. It reports whether it did. The watch goroutine calls it; tests may
// too.
func (w *Watcher) Install(rt *sundialv1.RoutingTable) bool {
	prev := w.cur.Load()
	if prev != nil && rt.GetVersion() < prev.Version() {
		return false
	}
	t := NewTable(rt, prev)
	w.cur.Store(t)
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	w.metrics.version.Set(float64(rt.GetVersion()))
	if prev == nil || prev.Version() != t.Version() {
		w.log.Info("routing table installed", zap.Uint64("routing_version", t.Version()), zap.Int("shards", t.ShardCount()))
	}
	if w.onTable != nil {
		w.onTable(t)
	}
	return true
}

// Stale reports whether the watch has heard no frame for longer than the
// silence bound of the stream it last heard (a broker that sends progress
// frames), and if so why, naming the broker; a watch before its first
// frame, or on a broker that sends no progress frames, is not stale.
func (w *Watcher) Stale() (bool, string) {
	bound := time.Duration(w.bound.Load())
	last := w.lastFrame.Load()
	if bound <= 0 || last == 0 {
		return false, ""
	}
	silent := w.clock.Now().Sub(time.Unix(0, last))
	if silent <= bound {
		return false, ""
	}
	w.mu.Lock()
	addr := w.watching
	w.mu.Unlock()
	return true, fmt.Sprintf("routing watch stale: no frame for %s (bound %s), watching broker %s", silent.Round(time.Millisecond), bound, addr)
}

// sinceFrame is the seconds since the latest watch frame, 0 before the
// first.
func (w *Watcher) sinceFrame() float64 {
	last := w.lastFrame.Load()
	if last == 0 {
		return 0
	}
	return w.clock.Now().Sub(time.Unix(0, last)).Seconds()
}

// heard records a frame received now on a stream with silence bound bound
// (0: not judged). The time is stored first: Stale, reading between the
// two stores, may pair the new time with the old bound (not stale), never
// a new bound with an old time.
func (w *Watcher) heard(bound time.Duration) {
	w.lastFrame.Store(w.clock.Now().UnixNano())
	w.bound.Store(int64(bound))
}

// candidates are the addresses to watch from: the seeds, then the table's
// nodes, rotated to begin at start; those in suspect until after now go
// last, in the same order. Ended suspicions are deleted.
func (w *Watcher) candidates(start int, suspect map[string]time.Time, now time.Time) []string {
	seen := make(map[string]bool)
	var all []string
	for _, a := range append(append([]string(nil), w.cfg.Seeds...), w.cur.Load().NodeAddrs()...) {
		if a != "" && !seen[a] {
			seen[a] = true
			all = append(all, a)
		}
	}
	return RotateAvoiding(all, start, suspect, now)
}

// RotateAvoiding is addrs rotated to begin at start (a round robin), with
// the addresses avoid lists until after now moved to the end, in the same
// rotated order. Entries of avoid that ended are deleted.
func RotateAvoiding(addrs []string, start int, avoid map[string]time.Time, now time.Time) []string {
	for a, until := range avoid {
		if !now.Before(until) {
			delete(avoid, a)
		}
	}
	out := make([]string, 0, len(addrs))
	var last []string
	for i := range addrs {
		a := addrs[(start+i)%len(addrs)]
		if _, ok := avoid[a]; ok {
			last = append(last, a)
			continue
		}
		out = append(out, a)
	}
	return append(out, last...)
}

// errSilent ends a watch stream that stayed silent past its bound.
var errSilent = errors.New("routing: watch stream silent past its bound")

// Reasons a watch stream ended, the restarts metric's reason label.
const (
	reasonSilent = "silent" // no frame within the silence bound
	reasonEnded  = "ended"  // the broker ended the stream
	reasonError  = "error"  // the stream failed (connection lost, refused, keepalive)
)

func endReason(err error) string {
	switch {
	case errors.Is(err, errSilent):
		return reasonSilent
	case errors.Is(err, io.EOF):
		return reasonEnded
	}
	return reasonError
}

func (w *Watcher) run(ctx context.Context) {
	backoff := minWatchBackoff
	suspect := make(map[string]time.Time) // broker address → until when it is watched last
	from, why := "", ""
	for i := 0; ; i++ {
		addrs := w.candidates(i, suspect, w.clock.Now())
		if len(addrs) == 0 {
			w.log.Error("no broker address to watch routing from")
			return
		}
		addr := addrs[0]
		if from != "" {
			w.log.Info("routing watch moves", zap.String("from_broker_addr", from), zap.String("broker_addr", addr), zap.String("reason", why))
		}
		got, err := w.watch(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = minWatchBackoff
		}
		from, why = addr, endReason(err)
		if why == reasonSilent {
			suspect[addr] = w.clock.Now().Add(w.cfg.SuspectInterval)
		}
		w.metrics.restarts.WithLabelValues(why).Inc()
		w.log.Warn("routing watch ended", zap.String("broker_addr", addr), zap.String("reason", why), zap.Error(err), zap.Duration("backoff", backoff))
		select {
		case <-w.clock.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// frame is one answer of a watch stream's Recv.
type frame struct {
	rt  *sundialv1.RoutingTable
	err error
}

// watch follows one stream until it fails or stays silent past its bound;
// got reports whether any table arrived on it.
func (w *Watcher) watch(ctx context.Context, addr string) (got bool, err error) {
	conn, err := w.pool.Conn(addr)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &sundialv1.WatchRoutingRequest{ProgressIntervalMs: (w.cfg.SilenceTimeout / 4).Milliseconds()}
	stream, err := sundialv1.NewClusterClient(conn).WatchRouting(ctx, req)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	w.watching = addr
	w.mu.Unlock()
	w.metrics.broker.WithLabelValues(addr).Set(1)
	defer w.metrics.broker.Reset()

	// The receiver goroutine ends when the stream fails, which cancel
	// makes it do; watch returns only after it ended.
	frames := make(chan frame)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			rt, err := stream.Recv()
			select {
			case frames <- frame{rt, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
	}()

	// Until the first frame names the broker's interval, a broker asked
	// for progress frames gets the configured bound: a broker frozen
	// before it answered is left too.
	var silence <-chan time.Time
	if w.cfg.SilenceTimeout > 0 {
		silence = w.clock.After(w.cfg.SilenceTimeout)
	}
	for {
		select {
		case f := <-frames:
			if f.err != nil {
				return got, f.err
			}
			bound := w.silenceBound(f.rt)
			silence = nil
			if bound > 0 {
				silence = w.clock.After(bound)
			}
			w.heard(bound)
			if f.rt.GetProgressOnly() {
				continue
			}
			got = true
			w.Install(f.rt)
		case <-silence:
			return got, errSilent
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

// silenceBound is how long the stream that brought rt may stay silent: 0
// (no bound) when the broker sends no progress frames or none were asked
// for, else SilenceTimeout but at least four of the broker's intervals.
func (w *Watcher) silenceBound(rt *sundialv1.RoutingTable) time.Duration {
	interval := time.Duration(rt.GetProgressIntervalMs()) * time.Millisecond
	if w.cfg.SilenceTimeout <= 0 || interval <= 0 {
		return 0
	}
	return max(w.cfg.SilenceTimeout, 4*interval)
}
