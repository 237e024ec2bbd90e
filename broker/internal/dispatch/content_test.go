package dispatch

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// A keyed rewrite that keeps the due time (REPLACE with the same due,
// DEBOUNCE at its max_wait cap) ordered between a round's read of the body
// and its lease, fenced the way the broker fences keyed publishes: the old
// payload is never pushed once the rewrite was answered, and the new one is.
func TestRewriteRacingARoundDeliversOnlyTheNewPayload(t *testing.T) {
	tests := []struct {
		name     string
		conflict fsmpb.KeyConflict
		maxWait  int64
		want     fsmpb.KeyOutcome
	}{
		{"replace", fsmpb.KeyConflict_KEY_CONFLICT_REPLACE, 0, fsmpb.KeyOutcome_KEY_OUTCOME_REPLACED},
		{"debounce at its cap", fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE, 50, fsmpb.KeyOutcome_KEY_OUTCOME_DEBOUNCED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t)
				now := time.Now().UnixMilli()
				due := now + 50
				r.publishMessages(&fsmpb.StoredMessage{Topic: "t", Key: "k", Payload: []byte("old"), PublishedAtMs: now, DueAtMs: due, OnConflict: tt.conflict, MaxWaitMs: tt.maxWait})
				var once sync.Once
				r.log.beforeLease = func() {
					once.Do(func() {
						// The round has read the old body; the rewrite begins
						// and is ordered ahead of the round's lease.
						end := r.d.BeginChange()
						m := &fsmpb.StoredMessage{Topic: "t", Key: "k", Payload: []byte("new"), PublishedAtMs: now, DueAtMs: due + 1000, OnConflict: tt.conflict, MaxWaitMs: tt.maxWait}
						if tt.conflict == fsmpb.KeyConflict_KEY_CONFLICT_REPLACE {
							m.DueAtMs = due
						}
						p := &fsmpb.Publish{NowMs: time.Now().UnixMilli(), Messages: []*fsmpb.StoredMessage{m}}
						out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
						end(err)
						if err != nil || out.Published[0].KeyOutcome != tt.want || out.Published[0].DueAtMs != due {
							t.Errorf("rewrite = %v, %v; want %v due %d", out.GetPublished(), err, tt.want, due)
						}
					})
				}
				c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
				r.d.Attach(c)
				g, ok := next(c, 5*time.Second)
				if !ok {
					t.Fatalf("no delivery")
				}
				if string(g.d.Payload) != "new" || g.d.Attempt != 1 {
					t.Fatalf("delivery = payload %q attempt %d, want the rewritten payload new at attempt 1", g.d.Payload, g.d.Attempt)
				}
				if code := r.ack(g.d); code != fsmpb.RefCode_REF_CODE_OK {
					t.Fatalf("ack = %v, want OK", code)
				}
				if g, ok := next(c, 300*time.Millisecond); ok {
					t.Fatalf("second delivery %q after the ack", g.d.Payload)
				}
			})
		})
	}
}
