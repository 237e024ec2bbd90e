package history

import (
	"errors"
	"strings"
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

func TestJSONRoundTrip(t *testing.T) {
	r := NewRecorder()
	op := r.Invoke(Op{Kind: Publish, RequestID: "r", Payload: "p", DelayMs: 5})
	r.Complete(op, OK, nil, func(o *Op) { o.MessageID, o.Outcome = "m", Created })
	r.Delivered(Op{MessageID: "m", Attempt: 1, LeaseDeadlineMs: 9})
	var sb strings.Builder
	if err := WriteJSON(&sb, r.Ops()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(strings.NewReader(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := r.Ops()
	if len(got) != len(want) {
		t.Fatalf("ReadJSON(WriteJSON(ops)) has %d ops, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Invoke.Equal(want[i].Invoke) || got[i].MessageID != want[i].MessageID || got[i].Outcome != want[i].Outcome || got[i].Kind != want[i].Kind {
			t.Fatalf("op %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
