package fsm

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/store"
)

// BenchmarkApplyLifecycle applies what one replica applies for a message
// from publish to ack, 100 messages per entry as the group-commit batches
// them under load: a publish (100-byte payloads, with a request id), a
// lease of all 100, an ack of all 100. The DB is on disk with the broker's
// options. Every replica of a shard pays this for every message, so it
// bounds what 3 replicas on one machine can take; docs/performance.md
// compares it with the peers' per-message budget.
func BenchmarkApplyLifecycle(b *testing.B) {
	db, err := store.Open(store.Config{Dir: b.TempDir()}, zap.NewNop())
	if err != nil {
		b.Fatalf("store.Open() error = %v", err)
	}
	b.Cleanup(func() { db.Close() })
	r := &replica{t: b, s: New(db, shard, nil)}
	if _, err := r.s.Open(nil); err != nil {
		b.Fatalf("Open() error = %v", err)
	}
	const n = 100
	payload := make([]byte, 100)
	var pub, lease, ack time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		due := int64(1_000 + i)
		p := &fsmpb.Publish{RequestId: fmt.Sprint("req-", i), NowMs: due - 1}
		for range n {
			p.Messages = append(p.Messages, &fsmpb.StoredMessage{Topic: "t", Payload: payload, PublishedAtMs: due - 1, DueAtMs: due})
		}
		t0 := time.Now()
		out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
		t1 := time.Now()
		l := &fsmpb.Lease{NowMs: due}
		a := &fsmpb.Ack{NowMs: due + 1}
		for _, po := range out[0].Published {
			ref := &fsmpb.MessageRef{MessageId: po.MessageId, Group: DefaultGroup}
			l.Items = append(l.Items, &fsmpb.LeaseItem{Ref: ref, VisibleAtMs: due, DeadlineMs: due + 30_000})
			a.Refs = append(a.Refs, &fsmpb.MessageRef{MessageId: po.MessageId, Group: DefaultGroup, Attempt: 1})
		}
		codes := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: l}})[0].Codes
		t2 := time.Now()
		acked := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: a}})[0].Codes
		t3 := time.Now()
		if codes[n-1] != fsmpb.RefCode_REF_CODE_OK || acked[n-1] != fsmpb.RefCode_REF_CODE_OK {
			b.Fatalf("lease %v, ack %v: want OK", codes[n-1], acked[n-1])
		}
		pub, lease, ack = pub+t1.Sub(t0), lease+t2.Sub(t1), ack+t3.Sub(t2)
	}
	msgs := float64(b.N * n)
	b.ReportMetric(float64(pub.Nanoseconds())/msgs, "publish-ns/msg")
	b.ReportMetric(float64(lease.Nanoseconds())/msgs, "lease-ns/msg")
	b.ReportMetric(float64(ack.Nanoseconds())/msgs, "ack-ns/msg")
	b.ReportMetric(float64((pub+lease+ack).Nanoseconds())/msgs, "ns/msg")
}
