package auth

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Conns gives a connection to a broker address (routing.Pool).
type Conns interface {
	Conn(addr string) (*grpc.ClientConn, error)
}

// Watcher follows AuthSync.WatchAuth on one broker at a time and installs
// each state in its Store. A broker sends a frame at least every second;
// a stream silent for silenceTimeout is given up and another broker
// watched, so a frozen broker does not freeze revocations.
type Watcher struct {
	store *Store
	conns Conns
	addrs func() []string // brokers to watch from, in the order to try
	log   *zap.Logger

	cancel context.CancelFunc
	done   chan struct{}
}

const (
	watchBackoff   = 200 * time.Millisecond
	silenceTimeout = 3 * time.Second
)

// NewWatcher returns a watcher installing into store.
func NewWatcher(store *Store, conns Conns, addrs func() []string, log *zap.Logger) *Watcher {
	return &Watcher{store: store, conns: conns, addrs: addrs, log: log}
}

// Start launches the watch goroutine; Stop ends it.
func (w *Watcher) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
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

func (w *Watcher) run(ctx context.Context) {
	for i := 0; ; i++ {
		addrs := w.addrs()
		if len(addrs) > 0 {
			addr := addrs[i%len(addrs)]
			err := w.watch(ctx, addr)
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("auth watch ended", zap.String("broker_addr", addr), zap.Error(err))
		}
		select {
		case <-time.After(watchBackoff):
		case <-ctx.Done():
			return
		}
	}
}

func (w *Watcher) watch(ctx context.Context, addr string) error {
	conn, err := w.conns.Conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := brokerv1.NewAuthSyncClient(conn).WatchAuth(ctx, &brokerv1.WatchAuthRequest{})
	if err != nil {
		return err
	}
	// A silent stream is cancelled by the timer; Recv then fails.
	silence := time.AfterFunc(silenceTimeout, cancel)
	defer silence.Stop()
	for {
		st, err := stream.Recv()
		if err != nil {
			return err
		}
		silence.Reset(silenceTimeout)
		if cur := w.store.Snapshot(); cur == nil || cur.Revision != st.GetRevision() {
			w.store.Install(NewSnapshot(st))
		}
	}
}
