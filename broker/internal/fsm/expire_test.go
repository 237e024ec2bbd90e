package fsm

import (
	"testing"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// A copy leased when its TTL ended outlives the TTL index entry; named by
// the dispatcher once its lease ran out, it is dropped as EXPIRED, while a
// copy under a running lease and a message rewritten with a later TTL stay.
func TestExpireNamedCopies(t *testing.T) {
	r := newReplica(t)
	msg := func(payload string) *fsmpb.StoredMessage {
		return &fsmpb.StoredMessage{Key: payload, Payload: []byte(payload), DueAtMs: 100, ExpiresAtMs: 150}
	}
	ran := r.apply(cmdPublish(100, msg("ran-out")))[0].Published[0].MessageId
	running := r.apply(cmdPublish(100, msg("running")))[0].Published[0].MessageId
	renewed := r.apply(cmdPublish(100, &fsmpb.StoredMessage{Key: "renewed", DueAtMs: 500, ExpiresAtMs: 550}))[0].Published[0].MessageId
	r.apply(lease(ran, 0, 100, 180), lease(running, 0, 100, 5000))
	// The TTL sweep at 160 skips the leased copies and forgets their expiry.
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: 160, Limit: 10}}})
	if c := r.counters("t", DefaultGroup); c.Pending != 3 || c.InFlight != 2 {
		t.Fatalf("counters after the sweep = %v, want 3 pending, the 2 leased in flight", c)
	}
	// A REPLACE renews renewed's TTL before it is named.
	r.apply(cmdPublish(200, &fsmpb.StoredMessage{Key: "renewed", DueAtMs: 500, ExpiresAtMs: 9000, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_REPLACE}))

	named := [][]byte{ran, running, renewed, ran, []byte("short")}
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: 600, Limit: 10, MessageIds: named}}})[0]
	if out.Count != 1 {
		t.Fatalf("expire of named copies dropped %d messages, want 1 (the lease that ran out)", out.Count)
	}
	if got := r.apply(cmdChange(&fsmpb.Change{NowMs: 600, Key: "ran-out", Cancel: true}))[0].Change.Code; got != fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND {
		t.Fatalf("cancel of the expired message = %v, want NOT_FOUND (ended EXPIRED)", got)
	}
	if got := r.apply(ack(running, 1))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack under the running lease = %v, want OK", got)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 1 || c.InFlight != 0 {
		t.Fatalf("counters = %v, want 1 pending (renewed), 0 in flight", c)
	}
}

// The dispatcher hears of a batch only when it inserted due-index or TTL
// entries: an ack, a sweep or an expiry gives it nothing to look at.
func TestNotifyOnlyOnInsertions(t *testing.T) {
	var calls []Change
	s := New(memDB(t), shard, func(_ uint64, c Change) { calls = append(calls, c) })
	if _, err := s.Open(nil); err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	r := &replica{t: t, s: s}
	var id []byte
	steps := []struct {
		name string
		cmd  func() *fsmpb.Command
		want bool
	}{
		{"publish inserts a due entry", func() *fsmpb.Command { return publish("", 100, 200) }, true},
		{"lease inserts its deadline", func() *fsmpb.Command { return lease(id, 0, 200, 5000) }, true},
		{"ack inserts nothing", func() *fsmpb.Command { return ack(id, 1) }, false},
		{"expire inserts nothing", func() *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: 1000, Limit: 10}}}
		}, false},
		{"sweep inserts nothing", func() *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 1000}}}
		}, false},
		{"publish with a ttl inserts", func() *fsmpb.Command {
			return cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100, ExpiresAtMs: 900})
		}, true},
	}
	for i, st := range steps {
		calls = nil
		out := r.apply(st.cmd())
		if i == 0 {
			id = out[0].Published[0].MessageId
		}
		if got := len(calls) > 0; got != st.want {
			t.Fatalf("%s: notified = %v (%v), want %v", st.name, got, calls, st.want)
		}
	}
}
