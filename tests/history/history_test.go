package history

import (
	"errors"
	"sync"
	"testing"
)

func TestRecorderConcurrentAndPendingIsUnknown(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				op := r.Invoke(Op{Kind: Publish, Payload: "p"})
				r.Complete(op, OK, nil, func(o *Op) { o.MessageID = "m" })
				r.Delivered(Op{MessageID: "m", Attempt: int32(i)})
			}
		}()
	}
	wg.Wait()
	pending := r.Invoke(Op{Kind: Cancel})
	timedOut := r.Invoke(Op{Kind: Ack})
	r.Complete(timedOut, Unknown, errors.New("deadline"), nil)
	ops := r.Ops()
	if len(ops) != 8*100*2+2 {
		t.Fatalf("len(Ops()) = %d, want %d", len(ops), 8*100*2+2)
	}
	for i, op := range ops {
		if op.Seq != i {
			t.Fatalf("Ops()[%d].Seq = %d, want %d", i, op.Seq, i)
		}
	}
	if got := ops[pending.Seq]; got.Answer != Unknown || !got.Complete.IsZero() {
		t.Fatalf("pending op = %s at %v, want unknown with no completion", got.Answer, got.Complete)
	}
	if got := ops[timedOut.Seq]; got.Answer != Unknown || !got.Complete.IsZero() || got.Error != "deadline" {
		t.Fatalf("timed-out op = %s at %v (%q), want unknown with no completion", got.Answer, got.Complete, got.Error)
	}
}
