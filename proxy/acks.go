package proxy

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy/internal/forward"
)

// ackCoalescer merges the acks bound for one shard into one broker call:
// while a call is in flight, acks from every stream and unary request
// gather and go out together in the next. Consumers ack one delivery at a
// time, so without it every ack was a broker RPC of its own.
//
// Goroutines: at most one flusher per shard, started by the first ack that
// finds none running; it exits when its queue is empty. mu guards queues.
type ackCoalescer struct {
	timeout time.Duration
	call    func(ctx context.Context, shard uint64, fn forward.Call) error

	mu     sync.Mutex
	queues map[uint64]*ackQueue
}

type ackQueue struct {
	pending  []*ackWaiter
	flushing bool
}

type ackWaiter struct {
	receipts []string
	done     chan ackAnswer
}

type ackAnswer struct {
	results []*sundialv1.ReceiptResult
	err     error
}

// maxAckBatch caps the receipts of one coalesced call.
const maxAckBatch = 4096

func newAckCoalescer(timeout time.Duration, call func(context.Context, uint64, forward.Call) error) *ackCoalescer {
	return &ackCoalescer{timeout: timeout, call: call, queues: map[uint64]*ackQueue{}}
}

// Ack acks receipts of shard and answers their results in order.
func (a *ackCoalescer) Ack(ctx context.Context, shard uint64, receipts []string) ([]*sundialv1.ReceiptResult, error) {
	w := &ackWaiter{receipts: receipts, done: make(chan ackAnswer, 1)}
	a.mu.Lock()
	q, ok := a.queues[shard]
	if !ok {
		q = &ackQueue{}
		a.queues[shard] = q
	}
	q.pending = append(q.pending, w)
	start := !q.flushing
	q.flushing = true
	a.mu.Unlock()
	if start {
		// The flusher serves every ack that queues behind this one, so this
		// caller's cancellation must not end it: it keeps ctx's values only,
		// and each broker call is bounded by a.timeout.
		go a.flush(context.WithoutCancel(ctx), shard, q)
	}
	select {
	case ans := <-w.done:
		return ans.results, ans.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (a *ackCoalescer) flush(ctx context.Context, shard uint64, q *ackQueue) {
	for {
		a.mu.Lock()
		var batch []*ackWaiter
		n := 0
		for len(q.pending) > 0 && (n == 0 || n+len(q.pending[0].receipts) <= maxAckBatch) {
			n += len(q.pending[0].receipts)
			batch = append(batch, q.pending[0])
			q.pending = q.pending[1:]
		}
		if len(batch) == 0 {
			q.flushing = false
			delete(a.queues, shard)
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		all := make([]string, 0, n)
		for _, w := range batch {
			all = append(all, w.receipts...)
		}
		var results []*sundialv1.ReceiptResult
		callCtx, cancel := context.WithTimeout(ctx, a.timeout)
		err := a.call(callCtx, shard, func(ctx context.Context, conn *grpc.ClientConn) error {
			resp, err := brokerv1.NewShardClient(conn).Ack(ctx, &brokerv1.ShardAckRequest{ShardId: shard, Receipts: all})
			results = resp.GetResults()
			return err
		})
		cancel()
		if err == nil && len(results) != len(all) {
			// A broker bug or a mismatched version, not the caller's:
			// each receipt fails with Internal saying what happened.
			err = status.Errorf(codes.Internal, "proxy: shard %d answered %d ack results for %d receipts", shard, len(results), len(all))
		}
		off := 0
		for _, w := range batch {
			if err != nil {
				w.done <- ackAnswer{err: err}
				continue
			}
			w.done <- ackAnswer{results: results[off : off+len(w.receipts)]}
			off += len(w.receipts)
		}
	}
}
