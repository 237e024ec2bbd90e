package routing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Reconnect backoff of the watch stream.
const (
	minWatchBackoff = 100 * time.Millisecond
	maxWatchBackoff = 3 * time.Second
)

// Watcher follows Cluster.WatchRouting on one broker at a time and keeps
// the newest table. On a stream error it reconnects with backoff to the
// next address: the seeds first, then every node address learned from the
// table.
type Watcher struct {
	seeds   []string
	pool    *Pool
	log     *zap.Logger
	metrics *Metrics
	onTable func(*Table)

	cur atomic.Pointer[Table]

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed (and replaced) whenever cur changes

	cancel context.CancelFunc
	done   chan struct{}
}

// NewWatcher returns a watcher over seeds. onTable, if not nil, is called
// from the watcher goroutine after each new table is installed; it must
// not block.
func NewWatcher(seeds []string, pool *Pool, log *zap.Logger, m *Metrics, onTable func(*Table)) *Watcher {
	return &Watcher{
		seeds:   seeds,
		pool:    pool,
		log:     log,
		metrics: m.m(),
		onTable: onTable,
		changed: make(chan struct{}),
	}
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

func (w *Watcher) candidates() []string {
	seen := make(map[string]bool)
	var out []string
	for _, a := range append(append([]string(nil), w.seeds...), w.cur.Load().NodeAddrs()...) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

func (w *Watcher) run(ctx context.Context) {
	backoff := minWatchBackoff
	for i := 0; ; i++ {
		addrs := w.candidates()
		if len(addrs) == 0 {
			w.log.Error("no broker address to watch routing from")
			return
		}
		addr := addrs[i%len(addrs)]
		got, err := w.watch(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = minWatchBackoff
		}
		w.metrics.reconnects.Inc()
		w.log.Warn("routing watch ended", zap.String("broker_addr", addr), zap.Error(err), zap.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// watch follows one stream until it fails; got reports whether any table
// arrived on it.
func (w *Watcher) watch(ctx context.Context, addr string) (got bool, err error) {
	conn, err := w.pool.Conn(addr)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := sundialv1.NewClusterClient(conn).WatchRouting(ctx, &sundialv1.WatchRoutingRequest{})
	if err != nil {
		return false, err
	}
	w.metrics.broker.WithLabelValues(addr).Set(1)
	defer w.metrics.broker.Reset()
	for {
		rt, err := stream.Recv()
		if err != nil {
			return got, err
		}
		got = true
		w.Install(rt)
	}
}
