package fsm

import (
	"bytes"
	"testing"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// An ack of many messages in one entry writes an end record per message
// but one forget-index entry for all of them (issue 10: one write less per
// acked message); a change by id still answers definitely until the forget
// time, and a sweep then forgets every end record and the entry, its
// limit counting the records.
func TestAckOfABatchWritesOneForgetEntry(t *testing.T) {
	const (
		n         = 100
		window    = 1000 // cmdPublish's dedup window
		tagEnd    = 'e'
		tagForget = 'v'
	)
	r := newReplica(t)
	msgs := make([]*fsmpb.StoredMessage, n)
	for i := range msgs {
		msgs[i] = &fsmpb.StoredMessage{DueAtMs: 100}
	}
	var ids [][]byte
	for _, p := range r.apply(cmdPublish(100, msgs...))[0].Published {
		ids = append(ids, p.MessageId)
	}
	l := &fsmpb.Lease{NowMs: 100}
	a := &fsmpb.Ack{NowMs: 200}
	for _, id := range ids {
		l.Items = append(l.Items, &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup}, VisibleAtMs: 100, DeadlineMs: 5000})
		a.Refs = append(a.Refs, &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup, Attempt: 1})
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: l}})
	for i, c := range r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: a}})[0].Codes {
		if c != fsmpb.RefCode_REF_CODE_OK {
			t.Fatalf("ack %d = %v, want OK", i, c)
		}
	}
	if got := tagsOf(r); got[tagEnd] != n || got[tagForget] != 1 {
		t.Fatalf("after acking %d messages in one entry: %d end records, %d forget entries; want %d, 1", n, got[tagEnd], got[tagForget], n)
	}
	forgetAt := int64(200 + window)
	cancel := func(id []byte, nowMs int64) fsmpb.ChangeCode {
		return r.apply(cmdChange(&fsmpb.Change{NowMs: nowMs, MessageId: id, Cancel: true}))[0].Change.Code
	}
	if got := cancel(ids[n-1], forgetAt-1); got != fsmpb.ChangeCode_CHANGE_CODE_ALREADY_DELIVERED {
		t.Fatalf("cancel of an acked message inside the window = %v, want ALREADY_DELIVERED", got)
	}
	r.apply(sweep(forgetAt-1-window, forgetAt-1, 0))
	if got := tagsOf(r); got[tagEnd] != n {
		t.Fatalf("end records after a sweep before their forget time = %d, want %d", got[tagEnd], n)
	}
	if out := r.apply(sweep(forgetAt-window, forgetAt, n))[0]; out.More {
		t.Fatalf("sweep of limit %d at the forget time answered more, want the one entry to forget all %d records", n, n)
	}
	if got := tagsOf(r); got[tagEnd] != 0 || got[tagForget] != 0 {
		t.Fatalf("after the sweep at the forget time: %d end records, %d forget entries; want none", got[tagEnd], got[tagForget])
	}
	if got := cancel(ids[0], forgetAt); got != fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND {
		t.Fatalf("cancel of a forgotten message = %v, want NOT_FOUND", got)
	}
}

// ackAll publishes n messages, leases and acks them in one entry each, and
// answers their ids: one Raft entry that ends n messages at once.
func ackAll(r *replica, n int) [][]byte {
	r.t.Helper()
	msgs := make([]*fsmpb.StoredMessage, n)
	for i := range msgs {
		msgs[i] = &fsmpb.StoredMessage{DueAtMs: 100}
	}
	var ids [][]byte
	for _, p := range r.apply(cmdPublish(100, msgs...))[0].Published {
		ids = append(ids, p.MessageId)
	}
	l := &fsmpb.Lease{NowMs: 100}
	a := &fsmpb.Ack{NowMs: 200}
	for _, id := range ids {
		l.Items = append(l.Items, &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup}, VisibleAtMs: 100, DeadlineMs: 5000})
		a.Refs = append(a.Refs, &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup, Attempt: 1})
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: l}})
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: a}})
	return ids
}

// A sweep's limit counts the records it deletes, not forget-index entries:
// one entry that ended 1000 messages took 1000 end-record deletes in one
// apply under a sweep limit of 1 before (issue 19: 200k in one apply, 1.3 s
// and 77 MiB on every replica). Now each apply deletes at most the limit,
// an entry writes its ids in parts of at most endsPerEntry, and replicas
// sweeping alike hash equal after every apply.
func TestSweepLimitCountsEndRecords(t *testing.T) {
	const (
		n        = 1000
		limit    = 100
		window   = 1000 // cmdPublish's dedup window
		tagEnd   = 'e'
		tagForgt = 'v'
		forgetAt = 200 + window
	)
	a, b := newReplica(t), newReplica(t)
	ackAll(a, n)
	ackAll(b, n)
	if got, want := tagsOf(a)[tagForgt], (n+endsPerEntry-1)/endsPerEntry; got != want {
		t.Fatalf("forget entries of one entry that ended %d messages = %d, want %d (parts of %d)", n, got, want, endsPerEntry)
	}
	for applies := 1; ; applies++ {
		before := tagsOf(a)[tagEnd]
		out := a.apply(sweep(forgetAt-window, forgetAt, limit))[0]
		b.apply(sweep(forgetAt-window, forgetAt, limit))
		after := tagsOf(a)[tagEnd]
		if before-after > limit {
			t.Fatalf("sweep %d of limit %d deleted %d end records", applies, limit, before-after)
		}
		if !bytes.Equal(a.hash(), b.hash()) {
			t.Fatalf("replicas hash differently after sweep %d", applies)
		}
		if !out.More {
			if after != 0 || tagsOf(a)[tagForgt] != 0 {
				t.Fatalf("sweep %d answered no more with %d end records and %d forget entries left", applies, after, tagsOf(a)[tagForgt])
			}
			if applies != n/limit {
				t.Errorf("sweeps of limit %d to forget %d end records = %d, want %d", limit, n, applies, n/limit)
			}
			return
		}
		if before == after {
			t.Fatalf("sweep %d answered more and deleted nothing", applies)
		}
	}
}
