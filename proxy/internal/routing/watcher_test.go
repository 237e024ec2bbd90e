package routing

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeClock is a Clock that moves only when Advance is called.
type fakeClock struct {
	mu      sync.Mutex // guards now, waiters
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock by d and fires the waiters due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// watchBroker serves WatchRouting. Its first stream sends table (naming
// the progress interval asked for when progress is set, as brokers with
// progress frames do) and then whatever is pushed on more; when frozen,
// later streams send nothing, as a broker stopped with SIGSTOP.
type watchBroker struct {
	sundialv1.UnimplementedClusterServer
	table    *sundialv1.RoutingTable
	progress bool
	frozen   bool
	more     chan *sundialv1.RoutingTable

	mu      sync.Mutex // guards streams
	streams int
}

func (b *watchBroker) WatchRouting(req *sundialv1.WatchRoutingRequest, st grpc.ServerStreamingServer[sundialv1.RoutingTable]) error {
	b.mu.Lock()
	b.streams++
	first := b.streams == 1
	b.mu.Unlock()
	if first || !b.frozen {
		if err := st.Send(b.frame(req, b.table)); err != nil {
			return err
		}
	}
	for {
		select {
		case rt := <-b.more:
			if err := st.Send(b.frame(req, rt)); err != nil {
				return err
			}
		case <-st.Context().Done():
			return nil
		}
	}
}

func (b *watchBroker) frame(req *sundialv1.WatchRoutingRequest, rt *sundialv1.RoutingTable) *sundialv1.RoutingTable {
	if b.progress {
		rt.ProgressIntervalMs = req.GetProgressIntervalMs()
	}
	return rt
}

func (b *watchBroker) streamCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams
}

func serveWatch(t *testing.T, b *watchBroker) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sundialv1.RegisterClusterServer(g, b)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// waitUntil polls cond every 10 ms for up to 30 s, calling step (if not
// nil) before each poll: a fake clock's advance stands for time passing.
func waitUntil(t *testing.T, what string, step func(), cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if step != nil {
			step()
		}
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const testSilence = 2 * time.Second

func startWatcher(t *testing.T, clock Clock, seeds ...string) (*Watcher, *Metrics) {
	t.Helper()
	pool := NewPool()
	t.Cleanup(pool.Close)
	m := NewMetrics(prometheus.NewRegistry())
	w := NewWatcher(WatcherConfig{Seeds: seeds, SilenceTimeout: testSilence, Clock: clock}, pool, zaptest.NewLogger(t), m, nil)
	w.Start(t.Context())
	t.Cleanup(w.Stop)
	return w, m
}

func version(w *Watcher) uint64 {
	if t := w.Table(); t != nil {
		return t.Version()
	}
	return 0
}

// A broker that sends progress frames and then falls silent (frozen, its
// connection open) is left once the silence bound passed: the watch is
// stale meanwhile, names the broker, keeps its table, and then follows
// another broker.
func TestWatcherLeavesSilentBroker(t *testing.T) {
	clock := newFakeClock()
	frozen := &watchBroker{table: &sundialv1.RoutingTable{Version: 1}, progress: true, frozen: true}
	live := &watchBroker{table: &sundialv1.RoutingTable{Version: 2}, progress: true}
	frozenAddr := serveWatch(t, frozen)
	w, m := startWatcher(t, clock, frozenAddr, serveWatch(t, live))

	waitUntil(t, "table 1 from the first seed", nil, func() bool { return version(w) == 1 })
	if stale, why := w.Stale(); stale {
		t.Fatalf("Stale() right after a frame = true (%s), want false", why)
	}
	clock.Advance(testSilence + time.Millisecond)
	stale, why := w.Stale()
	if !stale || !strings.Contains(why, frozenAddr) {
		t.Fatalf("Stale() after %v of silence = %v, %q; want true naming %s", testSilence, stale, why, frozenAddr)
	}
	if v := version(w); v != 1 {
		t.Fatalf("table version while the watch is stale = %d, want 1 kept", v)
	}
	// The reconnect backoff runs on the clock too.
	waitUntil(t, "table 2 from the other broker", func() { clock.Advance(50 * time.Millisecond) }, func() bool { return version(w) == 2 })
	if stale, why := w.Stale(); stale {
		t.Errorf("Stale() once the other broker answered = true (%s), want false", why)
	}
	if got := testutil.ToFloat64(m.restarts.WithLabelValues(reasonSilent)); got != 1 {
		t.Errorf("restarts{reason=silent} = %v, want 1", got)
	}
}

// A broker older than progress frames names no interval: however long it
// stays quiet, the watch is not stale and stays on it.
func TestWatcherDoesNotJudgeOldBroker(t *testing.T) {
	clock := newFakeClock()
	old := &watchBroker{table: &sundialv1.RoutingTable{Version: 1}, more: make(chan *sundialv1.RoutingTable)}
	other := &watchBroker{table: &sundialv1.RoutingTable{Version: 9}, progress: true}
	w, m := startWatcher(t, clock, serveWatch(t, old), serveWatch(t, other))

	waitUntil(t, "table 1 from the old broker", nil, func() bool { return version(w) == 1 })
	clock.Advance(10 * testSilence)
	if stale, why := w.Stale(); stale {
		t.Fatalf("Stale() on an old broker after %v = true (%s), want false", 10*testSilence, why)
	}
	old.more <- &sundialv1.RoutingTable{Version: 2}
	waitUntil(t, "table 2 on the same stream", nil, func() bool { return version(w) == 2 })
	if n := old.streamCount(); n != 1 {
		t.Errorf("old broker saw %d watch streams, want 1", n)
	}
	if n := other.streamCount(); n != 0 {
		t.Errorf("other broker saw %d watch streams, want 0", n)
	}
	for _, r := range []string{reasonSilent, reasonEnded, reasonError} {
		if got := testutil.ToFloat64(m.restarts.WithLabelValues(r)); got != 0 {
			t.Errorf("restarts{reason=%s} = %v, want 0", r, got)
		}
	}
}

func TestCandidatesPutSuspectsLast(t *testing.T) {
	now := time.Unix(100, 0)
	w := NewWatcher(WatcherConfig{Seeds: []string{"a", "b", "c"}}, nil, zaptest.NewLogger(t), nil, nil)
	tests := []struct {
		name    string
		start   int
		suspect map[string]time.Time
		want    string
	}{
		{"none suspect", 1, nil, "b,c,a"},
		{"one suspect", 1, map[string]time.Time{"b": now.Add(time.Second)}, "c,a,b"},
		{"suspicion ended", 1, map[string]time.Time{"b": now}, "b,c,a"},
		{"all suspect", 0, map[string]time.Time{"a": now.Add(time.Second), "b": now.Add(time.Second), "c": now.Add(time.Second)}, "a,b,c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			suspect := map[string]time.Time{}
			for a, u := range tt.suspect {
				suspect[a] = u
			}
			if got := strings.Join(w.candidates(tt.start, suspect, now), ","); got != tt.want {
				t.Errorf("candidates(%d, %v) = %s, want %s", tt.start, tt.suspect, got, tt.want)
			}
		})
	}
}
