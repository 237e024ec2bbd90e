package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

func TestSweepRepeatsUntilNothingIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{MaxSweepBatch: 4, DedupWindow: time.Minute})
		publishedAt := time.UnixMilli(1_000_000)
		publish := func(reqID string, at time.Time) []byte {
			p := &fsmpb.Publish{RequestId: reqID, NowMs: at.UnixMilli(), Messages: []*fsmpb.StoredMessage{{Topic: "t", DueAtMs: at.UnixMilli() + int64(time.Hour/time.Millisecond)}}}
			out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
			if err != nil {
				t.Fatalf("publish %s: %v", reqID, err)
			}
			return out.Published[0].MessageId
		}
		var first [][]byte
		for i := range 10 {
			first = append(first, publish(fmt.Sprintf("req-%d", i), publishedAt))
		}
		r.d.sweep(publishedAt.Add(2 * time.Minute))
		// Every request id is forgotten, though one sweep command forgets at
		// most 4: a retried request id makes a new message.
		for i, was := range first {
			if got := publish(fmt.Sprintf("req-%d", i), publishedAt.Add(3*time.Minute)); bytes.Equal(got, was) {
				t.Errorf("publish(req-%d) after the sweep answered the first message id: the dedup record was kept", i)
			}
		}
	})
}
