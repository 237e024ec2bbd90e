package proxy

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/proxy/internal/forward"
)

// A coalesced ack call serves every ack queued behind it: the caller that
// started the flusher going away must not cancel the broker calls of the
// others, nor its own batch already in flight.
func TestAckCoalescerOutlivesTheCallerThatStartedIt(t *testing.T) {
	b := &fakeBroker{leader: true, published: map[uint64]int{}}
	conn, err := grpc.NewClient(serve(t, b), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	a := newAckCoalescer(30*time.Second, func(ctx context.Context, _ uint64, fn forward.Call) error {
		entered <- struct{}{}
		<-release
		return fn(ctx, conn)
	})

	ctxA, cancelA := context.WithCancel(t.Context())
	errA := make(chan error, 1)
	go func() {
		_, err := a.Ack(ctxA, 1, []string{"a"})
		errA <- err
	}()
	<-entered // the flusher started by A has A's batch in flight
	type answer struct {
		receipts []string
		err      error
	}
	ansB := make(chan answer, 1)
	go func() {
		res, err := a.Ack(t.Context(), 1, []string{"b"})
		var got []string
		for _, r := range res {
			got = append(got, r.GetReceipt())
		}
		ansB <- answer{got, err}
	}()
	waitFor(t, "ack b queued behind the call in flight", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		q := a.queues[1]
		return q != nil && len(q.pending) == 1
	})
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Errorf("Ack(a) after its ctx was cancelled = %v, want context.Canceled", err)
	}
	close(release)
	if got := <-ansB; got.err != nil || !slices.Equal(got.receipts, []string{"b"}) {
		t.Errorf("Ack(b) = %v, %v, want [b], nil", got.receipts, got.err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Equal(b.acked, []string{"a", "b"}) {
		t.Errorf("broker acked %v, want [a b]", b.acked)
	}
}
