package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

func sweep(beforeMs, nowMs int64, limit uint32) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: beforeMs, NowMs: nowMs, Limit: limit}}}
}

// countPrefix counts the stored keys starting with prefix.
func (r *replica) countPrefix(prefix []byte) int {
	r.t.Helper()
	it, err := r.s.db.NewIter(nil)
	if err != nil {
		r.t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	n := 0
	for valid := it.SeekGE(prefix); valid && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
		n++
	}
	return n
}

func TestSweepIsBounded(t *testing.T) {
	r := newReplica(t)
	for i := range 10 {
		r.apply(publish(fmt.Sprintf("req-%d", i), 100, 100))
	}
	dedupAt, _ := keys.DedupAtRange(shard, 0)
	first := r.apply(sweep(200, 200, 4))[0]
	if !first.More {
		t.Fatalf("Sweep(limit 4) of 10 dedup records: more = false, want true")
	}
	if got := r.countPrefix(dedupAt); got != 6 {
		t.Fatalf("dedup records after one sweep of limit 4 = %d, want 6", got)
	}
	applies := 1
	for out := first; out.More; applies++ {
		if applies > 10 {
			t.Fatalf("sweep still answers more after %d applies", applies)
		}
		out = r.apply(sweep(200, 200, 4))[0]
	}
	if applies != 3 {
		t.Fatalf("sweeps of limit 4 to forget 10 records = %d, want 3", applies)
	}
	if got := r.countPrefix(dedupAt); got != 0 {
		t.Fatalf("dedup records after the repeated sweep = %d, want 0", got)
	}
	if again := r.apply(publish("req-3", 300, 300))[0].Published[0]; again.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_CREATED {
		t.Fatalf("publish of a forgotten request id = %v, want a new message", again)
	}
}

func TestSweepForgetsKeyRecordsAtTheirOwnTime(t *testing.T) {
	const window = 1000 // cmdPublish's dedup window
	r := newReplica(t)
	m := func() *fsmpb.StoredMessage {
		return &fsmpb.StoredMessage{Key: "k", DueAtMs: 100, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_IGNORE}
	}
	id := r.apply(cmdPublish(100, m()))[0].Published[0].MessageId
	r.apply(lease(id, 0, 100, 5000))
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{NowMs: 200, Refs: []*fsmpb.MessageRef{{MessageId: id, Group: DefaultGroup, Attempt: 1}}}}})
	forgetAt := int64(200 + window)
	keyRec, endRec := keys.Key(shard, "t", "k"), keys.End(shard, id)

	// The dispatcher sweeps request ids older than its window and key and
	// end records whose own time came.
	r.apply(sweep(forgetAt-1-window, forgetAt-1, 0))
	if !r.has(keyRec) || !r.has(endRec) {
		t.Fatalf("key record kept = %v, end record kept = %v before their forget time, want both kept", r.has(keyRec), r.has(endRec))
	}
	if got := r.apply(cmdPublish(forgetAt-1, m()))[0].Published[0]; got.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_IGNORED {
		t.Fatalf("keyed IGNORE publish inside the window = %v, want IGNORED", got)
	}
	if out := r.apply(sweep(forgetAt-window, forgetAt, 0))[0]; out.More {
		t.Fatalf("sweep of two records answered more")
	}
	if r.has(keyRec) || r.has(endRec) {
		t.Fatalf("after a sweep at the forget time: key record kept = %v, end record kept = %v, want both forgotten", r.has(keyRec), r.has(endRec))
	}
	forget, _ := keys.ForgetUntil(shard, 0)
	if got := r.countPrefix(forget); got != 0 {
		t.Fatalf("forget-index entries left = %d, want 0", got)
	}
	later := r.apply(cmdPublish(forgetAt, m()))[0].Published[0]
	if later.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_CREATED || bytes.Equal(later.MessageId, id) {
		t.Fatalf("keyed IGNORE publish right after the window = %v, want a new message", later)
	}
}

// groupRig holds a topic of 4 partitions whose groups default and zz have
// others copies per partition, and whose group m has one.
func groupRig(t *testing.T, others int) *replica {
	r := newReplica(t)
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "zz"}}})
	for p := range uint32(4) {
		var msgs []*fsmpb.StoredMessage
		for range others {
			msgs = append(msgs, &fsmpb.StoredMessage{Partition: p, DueAtMs: 100})
		}
		r.apply(cmdPublish(100, msgs...))
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "m"}}})
	for p := range uint32(4) {
		r.apply(cmdPublish(100, &fsmpb.StoredMessage{Partition: p, DueAtMs: 100}))
	}
	return r
}

func TestGroupRemovalVisitsOnlyItsOwnCopies(t *testing.T) {
	visited := func(others int) int {
		r := groupRig(t, others)
		b := r.s.db.NewIndexedBatch()
		defer b.Close()
		a := &applier{b: b, shard: shard, lows: map[keys.Queue]int64{}, counters: map[counterKey]*fsmpb.Counters{}, groupsOf: map[string][]string{}}
		n, err := a.dropTopicCopies("t", "m", 100, 0)
		if err != nil || n != 4 {
			t.Fatalf("dropTopicCopies(m) with %d other copies = %d, %v; want 4", others, n, err)
		}
		return a.visited
	}
	small, large := visited(10), visited(500)
	if large != small {
		t.Fatalf("keys visited removing group m: %d beside 10 other copies per partition, %d beside 500; want the same", small, large)
	}
}

func TestGroupPurgeAndRemovalKeepOtherGroups(t *testing.T) {
	r := groupRig(t, 3)
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Purge{Purge: &fsmpb.Purge{Topic: "t", Group: "m", Limit: 3, NowMs: 200}}})[0]
	if out.Count != 3 {
		t.Fatalf("purge of m with limit 3 removed %d, want 3", out.Count)
	}
	out = r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "m", Delete: true, Limit: 10}}})[0]
	if out.Count != 1 {
		t.Fatalf("removal of m removed %d copies, want the 1 left", out.Count)
	}
	for _, g := range []string{DefaultGroup, "zz"} {
		if c := r.counters("t", g); c.Pending != 16 {
			t.Fatalf("%s pending = %d, want 16 (12 before m, 4 after)", g, c.Pending)
		}
	}
	if c := r.counters("t", "m"); c.Pending != 0 {
		t.Fatalf("m pending = %d, want 0", c.Pending)
	}
	if r.has(keys.Group(shard, "t", "m")) {
		t.Fatalf("group m still registered after its removal")
	}
}

// deadLetter publishes a message on t due at dueMs and dead-letters it.
func (r *replica) deadLetter(dueMs int64) {
	r.t.Helper()
	id := r.apply(cmdPublish(dueMs, &fsmpb.StoredMessage{DueAtMs: dueMs, Payload: []byte("x")}))[0].Published[0].MessageId
	item := &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup}, VisibleAtMs: dueMs, DeadLetter: true}
	if got := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: dueMs, Items: []*fsmpb.LeaseItem{item}}}})[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		r.t.Fatalf("dead-letter lease = %v", got)
	}
}

// due answers the due-index entries of topic's default group, in order.
func (r *replica) due(topic string) []keys.DueEntry {
	r.t.Helper()
	prefix := keys.TopicDuePrefix(shard, topic)
	it, err := r.s.db.NewIter(nil)
	if err != nil {
		r.t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	var out []keys.DueEntry
	for valid := it.SeekGE(prefix); valid && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
		q, e, err := keys.ParseTopicDue(shard, topic, it.Key())
		if err != nil {
			r.t.Fatalf("ParseTopicDue() error = %v", err)
		}
		if q.Group == DefaultGroup {
			e.ID = bytes.Clone(e.ID)
			out = append(out, e)
		}
	}
	return out
}

func redrive(limit uint32, nowMs int64) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Topic: "t", Limit: limit, NowMs: nowMs}}}
}

func TestRedriveSkipsLeasedDeadLettersWithoutSpendingTheLimit(t *testing.T) {
	r := newReplica(t)
	for _, due := range []int64{100, 200, 5000} {
		r.deadLetter(due)
	}
	dead := r.due("t.dlq")
	if len(dead) != 3 {
		t.Fatalf("dead letters = %d, want 3", len(dead))
	}
	// A reader of the DLQ holds the first two; their lease deadlines sort
	// them ahead of the third.
	for _, e := range dead[:2] {
		r.apply(lease(e.ID, 0, e.VisibleAtMs, 1000))
	}
	if got := r.apply(redrive(1, 500))[0].Count; got != 1 {
		t.Fatalf("Redrive(limit 1) past 2 leased dead letters moved %d, want 1", got)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 1 {
		t.Fatalf("source pending after redrive = %d, want 1", c.Pending)
	}
	if c := r.counters("t.dlq", DefaultGroup); c.Pending != 2 || c.InFlight != 2 {
		t.Fatalf("dlq counters after redrive = %v, want the 2 leased ones left", c)
	}
}

func TestRedriveKeepsDeadLettersWithoutOrigin(t *testing.T) {
	r := newReplica(t)
	// A message published straight to the DLQ names no origin to go back to.
	r.apply(cmdPublish(50, &fsmpb.StoredMessage{Topic: "t.dlq", DueAtMs: 50, Payload: []byte("stray")}))
	r.deadLetter(100)
	if got := r.apply(redrive(1, 500))[0].Count; got != 1 {
		t.Fatalf("Redrive(limit 1) behind a dead letter without origin moved %d, want 1", got)
	}
	if got := r.apply(redrive(10, 600))[0].Count; got != 0 {
		t.Fatalf("Redrive of a dead letter without origin moved %d, want 0", got)
	}
	left := r.due("t.dlq")
	if len(left) != 1 || left[0].VisibleAtMs != 50 {
		t.Fatalf("dead letters left = %v, want the one without origin", left)
	}
	if c := r.counters("t.dlq", DefaultGroup); c.Pending != 1 {
		t.Fatalf("dlq pending = %d, want 1: the dead letter without origin stays", c.Pending)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 1 {
		t.Fatalf("source pending = %d, want 1 (the redriven one)", c.Pending)
	}
}

// forgetTopic applies the shard side of a topic's deletion, limit records
// per command, until nothing is left.
func (r *replica) forgetTopic(topic string, limit uint32) {
	r.t.Helper()
	for range 100 {
		out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: topic, Delete: true, Limit: limit}}})[0]
		if !out.More && out.Count < limit {
			return
		}
	}
	r.t.Fatalf("forgetting topic %s still answers more after 100 commands", topic)
}

func TestDeletedTopicLeavesNothingOnTheShard(t *testing.T) {
	r := newReplica(t)
	keyed := func(nowMs int64) *fsmpb.StoredMessage {
		return &fsmpb.StoredMessage{Key: "k", DueAtMs: nowMs, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_IGNORE}
	}
	r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "g2"}}})
	for range 3 {
		r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))
	}
	// A delivered keyed message is remembered, a dead letter counted.
	id := r.apply(cmdPublish(100, keyed(100)))[0].Published[0].MessageId
	r.apply(lease(id, 0, 100, 5000))
	r.apply(ack(id, 1))
	r.deadLetter(100)

	r.forgetTopic("t", 2)
	r.forgetTopic("t.dlq", 2)
	for _, prefix := range [][]byte{keys.TopicDuePrefix(shard, "t"), keys.CounterPrefix(shard, "t"), keys.CounterPrefix(shard, "t.dlq"), keys.GroupPrefix(shard, "t"), keys.GroupPrefix(shard, "t.dlq"), keys.KeyPrefix(shard, "t", "")} {
		if n := r.countPrefix(prefix); n != 0 {
			t.Fatalf("%d keys left under %q after the topic was deleted, want 0", n, prefix)
		}
	}

	// The topic is created again: only its default group gets copies, and
	// its key starts afresh.
	r.apply(cmdPublish(300, &fsmpb.StoredMessage{DueAtMs: 300}))
	again := r.apply(cmdPublish(300, keyed(300)))[0].Published[0]
	if again.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_CREATED {
		t.Fatalf("keyed IGNORE publish on the re-created topic = %v, want a new message", again)
	}
	if c := r.counters("t", "g2"); c.Pending != 0 || c.DeadLettered != 0 {
		t.Fatalf("g2 counters on the re-created topic = %v, want zero", c)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 2 || c.DeadLettered != 0 {
		t.Fatalf("default counters on the re-created topic = %v, want 2 pending, 0 dead-lettered", c)
	}
	if n := r.countPrefix(keys.QueuePrefix(shard, keys.Queue{Topic: "t", Group: "g2"})); n != 0 {
		t.Fatalf("g2 copies on the re-created topic = %d, want 0", n)
	}
}

func TestRemovedGroupCreatedAgainStartsAtZero(t *testing.T) {
	r := newReplica(t)
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "g2"}}})
	id := r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))[0].Published[0].MessageId
	item := &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: id, Group: "g2"}, VisibleAtMs: 100, DeadLetter: true}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: 100, Items: []*fsmpb.LeaseItem{item}}}})
	r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))
	if c := r.counters("t", "g2"); c.DeadLettered != 1 || c.Pending != 1 {
		t.Fatalf("g2 counters = %v, want 1 pending, 1 dead-lettered", c)
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "g2", Delete: true, Limit: 10}}})
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "g2"}}})
	if c := r.counters("t", "g2"); c.DeadLettered != 0 || c.Pending != 0 || c.InFlight != 0 {
		t.Fatalf("counters of g2 created again after its removal = %v, want zero", c)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 2 {
		t.Fatalf("default pending = %d, want 2", c.Pending)
	}
}
