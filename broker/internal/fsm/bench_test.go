package fsm

import (
	"fmt"
	"runtime"
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
//
// Beside wall time per step it reports the CPU time of the benchmark's own
// thread per step (cpu-*-ns/msg, Linux): the work of the apply itself
// (Pebble's flushes and compactions and the GC's background marking run on
// other threads), which holds steady on a machine shared with other work,
// where wall time counts the waits for a core too.
func BenchmarkApplyLifecycle(b *testing.B) { benchmarkLifecycle(b, 0) }

// BenchmarkApplyLifecycleDedupWindow is BenchmarkApplyLifecycle with the
// messages remembered for a dedup window once acked, as a topic's messages
// are by default: the ack also writes each message's end record and the
// forget index.
func BenchmarkApplyLifecycleDedupWindow(b *testing.B) { benchmarkLifecycle(b, 3_600_000) }

func benchmarkLifecycle(b *testing.B, dedupWindowMs int64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
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
	var cpuPub, cpuLease, cpuAck time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		due := int64(1_000 + i)
		p := &fsmpb.Publish{RequestId: fmt.Sprint("req-", i), NowMs: due - 1}
		for range n {
			p.Messages = append(p.Messages, &fsmpb.StoredMessage{Topic: "t", Payload: payload, PublishedAtMs: due - 1, DueAtMs: due, DedupWindowMs: dedupWindowMs})
		}
		c0, _ := threadCPU()
		t0 := time.Now()
		out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
		t1 := time.Now()
		c1, _ := threadCPU()
		l := &fsmpb.Lease{NowMs: due}
		a := &fsmpb.Ack{NowMs: due + 1}
		for _, po := range out[0].Published {
			ref := &fsmpb.MessageRef{MessageId: po.MessageId, Group: DefaultGroup}
			l.Items = append(l.Items, &fsmpb.LeaseItem{Ref: ref, VisibleAtMs: due, DeadlineMs: due + 30_000})
			a.Refs = append(a.Refs, &fsmpb.MessageRef{MessageId: po.MessageId, Group: DefaultGroup, Attempt: 1})
		}
		c1b, _ := threadCPU()
		t1b := time.Now()
		codes := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: l}})[0].Codes
		t2 := time.Now()
		c2, _ := threadCPU()
		acked := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: a}})[0].Codes
		t3 := time.Now()
		c3, _ := threadCPU()
		if codes[n-1] != fsmpb.RefCode_REF_CODE_OK || acked[n-1] != fsmpb.RefCode_REF_CODE_OK {
			b.Fatalf("lease %v, ack %v: want OK", codes[n-1], acked[n-1])
		}
		pub, lease, ack = pub+t1.Sub(t0), lease+t2.Sub(t1b), ack+t3.Sub(t2)
		cpuPub, cpuLease, cpuAck = cpuPub+c1-c0, cpuLease+c2-c1b, cpuAck+c3-c2
	}
	msgs := float64(b.N * n)
	b.ReportMetric(float64(pub.Nanoseconds())/msgs, "publish-ns/msg")
	b.ReportMetric(float64(lease.Nanoseconds())/msgs, "lease-ns/msg")
	b.ReportMetric(float64(ack.Nanoseconds())/msgs, "ack-ns/msg")
	b.ReportMetric(float64((pub+lease+ack).Nanoseconds())/msgs, "ns/msg")
	if _, ok := threadCPU(); ok {
		b.ReportMetric(float64(cpuPub.Nanoseconds())/msgs, "cpu-publish-ns/msg")
		b.ReportMetric(float64(cpuLease.Nanoseconds())/msgs, "cpu-lease-ns/msg")
		b.ReportMetric(float64(cpuAck.Nanoseconds())/msgs, "cpu-ack-ns/msg")
		b.ReportMetric(float64((cpuPub+cpuLease+cpuAck).Nanoseconds())/msgs, "cpu-ns/msg")
	}
}
