package fsm

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

func cmdPublish(nowMs int64, msgs ...*fsmpb.StoredMessage) *fsmpb.Command {
	for _, m := range msgs {
		if m.Topic == "" {
			m.Topic = "t"
		}
		m.PublishedAtMs = nowMs
		m.DedupWindowMs = 1000
	}
	return &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: &fsmpb.Publish{NowMs: nowMs, Messages: msgs}}}
}

func cmdChange(c *fsmpb.Change) *fsmpb.Command {
	if c.Topic == "" {
		c.Topic = "t"
	}
	return &fsmpb.Command{Kind: &fsmpb.Command_Change{Change: c}}
}

func (r *replica) counters(topic, group string) *fsmpb.Counters {
	r.t.Helper()
	c := &fsmpb.Counters{}
	v, closer, err := r.s.db.Get(keys.Counter(shard, topic, group))
	if err == nil {
		defer closer.Close()
		if err := proto.Unmarshal(v, c); err != nil {
			r.t.Fatalf("decode counters: %v", err)
		}
	}
	return c
}

func TestKeyConflicts(t *testing.T) {
	keyed := func(conflict fsmpb.KeyConflict, payload string, due, maxWait int64) *fsmpb.StoredMessage {
		return &fsmpb.StoredMessage{Key: "k", Payload: []byte(payload), DueAtMs: due, OnConflict: conflict, MaxWaitMs: maxWait}
	}
	tests := []struct {
		name        string
		second      *fsmpb.StoredMessage
		wantOutcome fsmpb.KeyOutcome
		wantSameID  bool
		wantDue     int64
	}{
		{"ignore answers the first id", keyed(fsmpb.KeyConflict_KEY_CONFLICT_IGNORE, "b", 900, 0), fsmpb.KeyOutcome_KEY_OUTCOME_IGNORED, true, 500},
		{"replace changes due and payload", keyed(fsmpb.KeyConflict_KEY_CONFLICT_REPLACE, "b", 900, 0), fsmpb.KeyOutcome_KEY_OUTCOME_REPLACED, true, 900},
		{"reject refuses", keyed(fsmpb.KeyConflict_KEY_CONFLICT_REJECT, "b", 900, 0), fsmpb.KeyOutcome_KEY_OUTCOME_REJECTED, true, 500},
		{"debounce pushes the due time", keyed(fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE, "b", 900, 0), fsmpb.KeyOutcome_KEY_OUTCOME_DEBOUNCED, true, 900},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t)
			first := r.apply(cmdPublish(100, keyed(tt.second.OnConflict, "a", 500, 0)))[0].Published[0]
			got := r.apply(cmdPublish(200, tt.second))[0].Published[0]
			if got.KeyOutcome != tt.wantOutcome || bytes.Equal(got.MessageId, first.MessageId) != tt.wantSameID || got.DueAtMs != tt.wantDue {
				t.Fatalf("second publish = %v, want outcome %v, same id %v, due %d", got, tt.wantOutcome, tt.wantSameID, tt.wantDue)
			}
			if c := r.counters("t", DefaultGroup); c.Pending != 1 {
				t.Fatalf("pending copies = %d, want 1: a key has one pending message", c.Pending)
			}
		})
	}
}

func TestDebounceNeverPastTheCap(t *testing.T) {
	r := newReplica(t)
	deb := func(now, due int64) *fsmpb.PublishOutcome {
		m := &fsmpb.StoredMessage{Key: "k", DueAtMs: due, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE, MaxWaitMs: 1000}
		return r.apply(cmdPublish(now, m))[0].Published[0]
	}
	deb(0, 300)
	deb(200, 500)
	if got := deb(900, 1200); got.DueAtMs != 1000 {
		t.Fatalf("debounced due = %d, want the cap 1000 (first publish 0 + max wait 1000)", got.DueAtMs)
	}
}

func TestKeyAfterDeliveryIsRememberedForTheWindow(t *testing.T) {
	r := newReplica(t)
	m := func() *fsmpb.StoredMessage { return &fsmpb.StoredMessage{Key: "k", DueAtMs: 100} }
	id := r.apply(cmdPublish(100, m()))[0].Published[0].MessageId
	r.apply(lease(id, 0, 100, 5000))
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{NowMs: 200, Refs: []*fsmpb.MessageRef{{MessageId: id, Group: DefaultGroup, Attempt: 1}}}}})
	again := r.apply(cmdPublish(300, m()))[0].Published[0]
	if again.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_IGNORED || !bytes.Equal(again.MessageId, id) {
		t.Fatalf("publish within the dedup window = %v, want IGNORED with the first id", again)
	}
	if got := r.apply(cmdChange(&fsmpb.Change{NowMs: 300, Key: "k", Cancel: true}))[0].Change.Code; got != fsmpb.ChangeCode_CHANGE_CODE_ALREADY_DELIVERED {
		t.Fatalf("cancel after delivery = %v, want ALREADY_DELIVERED", got)
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 1300}}})
	later := r.apply(cmdPublish(1300, m()))[0].Published[0]
	if later.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_CREATED || bytes.Equal(later.MessageId, id) {
		t.Fatalf("publish after the window = %v, want a new message", later)
	}
}

func TestCancelAndRescheduleOutcomes(t *testing.T) {
	r := newReplica(t)
	pending := r.apply(cmdPublish(100, &fsmpb.StoredMessage{Key: "p", DueAtMs: 500}))[0].Published[0].MessageId
	leased := r.apply(cmdPublish(100, &fsmpb.StoredMessage{Key: "l", DueAtMs: 100}))[0].Published[0].MessageId
	r.apply(lease(leased, 0, 100, 5000))

	steps := []struct {
		name string
		c    *fsmpb.Change
		want fsmpb.ChangeCode
		due  int64
	}{
		{"reschedule pending by key", &fsmpb.Change{NowMs: 150, Key: "p", DueAtMs: 800}, fsmpb.ChangeCode_CHANGE_CODE_DONE, 800},
		{"reschedule in flight", &fsmpb.Change{NowMs: 150, Key: "l", DueAtMs: 800}, fsmpb.ChangeCode_CHANGE_CODE_IN_FLIGHT, 100},
		{"cancel in flight", &fsmpb.Change{NowMs: 150, MessageId: leased, Cancel: true}, fsmpb.ChangeCode_CHANGE_CODE_IN_FLIGHT, 100},
		{"cancel pending by id", &fsmpb.Change{NowMs: 160, MessageId: pending, Cancel: true}, fsmpb.ChangeCode_CHANGE_CODE_DONE, 0},
		{"retried cancel answers the same", &fsmpb.Change{NowMs: 170, MessageId: pending, Cancel: true}, fsmpb.ChangeCode_CHANGE_CODE_DONE, 0},
		{"retried cancel by key too", &fsmpb.Change{NowMs: 170, Key: "p", Cancel: true}, fsmpb.ChangeCode_CHANGE_CODE_DONE, 0},
		{"reschedule cancelled", &fsmpb.Change{NowMs: 170, Key: "p", DueAtMs: 900}, fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, 0},
		{"unknown key", &fsmpb.Change{NowMs: 170, Key: "nope", Cancel: true}, fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, 0},
		{"other topic", &fsmpb.Change{NowMs: 170, Topic: "u", MessageId: leased, Cancel: true}, fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, 0},
	}
	for _, s := range steps {
		got := r.apply(cmdChange(s.c))[0].Change
		if got.Code != s.want || got.DueAtMs != s.due {
			t.Fatalf("%s: change = %v, want %v due %d", s.name, got, s.want, s.due)
		}
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 1 || c.InFlight != 1 {
		t.Fatalf("counters = %v, want 1 pending (the leased one), 1 in flight", c)
	}
}

func TestGroupsFanOut(t *testing.T) {
	r := newReplica(t)
	before := r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))[0].Published[0].MessageId
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "billing"}}})
	after := r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))[0].Published[0].MessageId
	if c := r.counters("t", "billing"); c.Pending != 1 {
		t.Fatalf("billing pending = %d, want 1: only messages after the group was created", c.Pending)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 2 {
		t.Fatalf("default pending = %d, want 2", c.Pending)
	}
	// One group's ack leaves the other's copy and the body in place.
	r.apply(lease(after, 0, 100, 5000))
	r.apply(ack(after, 1))
	_, cps, err := (&applier{b: r.s.db.NewIndexedBatch(), shard: shard, groupsOf: map[string][]string{}}).copies(after)
	if err != nil || len(cps) != 1 || cps[0].group != "billing" {
		t.Fatalf("copies after the default group's ack = %d, %v, want billing's only", len(cps), err)
	}
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "billing", Delete: true, Limit: 10}}})[0]
	if out.Count != 1 {
		t.Fatalf("group delete removed %d copies, want 1", out.Count)
	}
	_ = before
}

func TestDeadLetterAndRedrive(t *testing.T) {
	r := newReplica(t)
	id := r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100, Payload: []byte("x")}))[0].Published[0].MessageId
	r.apply(lease(id, 0, 100, 200))
	item := &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup, Attempt: 1}, VisibleAtMs: 200, DeadLetter: true}
	if got := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: 300, Items: []*fsmpb.LeaseItem{item}}}})[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("dead-letter lease = %v", got)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 0 || c.DeadLettered != 1 {
		t.Fatalf("source counters = %v, want 0 pending, 1 dead-lettered", c)
	}
	if c := r.counters("t.dlq", DefaultGroup); c.Pending != 1 {
		t.Fatalf("dlq pending = %d, want 1", c.Pending)
	}
	moved := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Topic: "t", Limit: 10, NowMs: 400}}})[0]
	if moved.Count != 1 {
		t.Fatalf("redrive moved %d, want 1", moved.Count)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 1 {
		t.Fatalf("source pending after redrive = %d, want 1", c.Pending)
	}
	if c := r.counters("t.dlq", DefaultGroup); c.Pending != 0 {
		t.Fatalf("dlq pending after redrive = %d, want 0", c.Pending)
	}
}

func TestExpireSkipsInFlight(t *testing.T) {
	r := newReplica(t)
	a := r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100, ExpiresAtMs: 150}))[0].Published[0].MessageId
	b := r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100, ExpiresAtMs: 150}))[0].Published[0].MessageId
	r.apply(lease(b, 0, 100, 5000))
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: 200, Limit: 10}}})[0]
	if out.Count != 2 {
		t.Fatalf("expire visited %d messages, want 2", out.Count)
	}
	if got := r.apply(cmdChange(&fsmpb.Change{NowMs: 200, MessageId: a, Cancel: true}))[0].Change.Code; got != fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND {
		t.Fatalf("cancel of an expired message = %v, want NOT_FOUND", got)
	}
	if got := r.apply(ack(b, 1))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack of the in-flight copy after expiry = %v, want OK", got)
	}
}

func TestPurge(t *testing.T) {
	r := newReplica(t)
	for range 5 {
		r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))
	}
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Purge{Purge: &fsmpb.Purge{Topic: "t", Limit: 3}}})[0]
	if out.Count != 3 {
		t.Fatalf("purge removed %d, want 3 (the limit)", out.Count)
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Purge{Purge: &fsmpb.Purge{Topic: "t", Limit: 3}}})
	if c := r.counters("t", DefaultGroup); c.Pending != 0 {
		t.Fatalf("pending after purges = %d, want 0", c.Pending)
	}
}
