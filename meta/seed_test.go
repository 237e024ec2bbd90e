package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/ring"
)

// withGroups is withTopics with group "audit" on topic a (done).
func withGroups(t *testing.T) *State {
	t.Helper()
	s := withTopics(t)
	code, id := submitAdminOp(t, s, NewCreateGroup("a", "audit", topicOwners(s.RingShards(), "a", 16), time.Second), false)
	if code != ResultOK {
		t.Fatalf("create-group a/audit = %d, want ResultOK", code)
	}
	runAll(t, s, id)
	return s
}

// unfinishedSeeds returns the unfinished operations registering groups
// (register-group steps that name their group), by topic.
func unfinishedSeeds(s *State) map[string]*Operation {
	out := map[string]*Operation{}
	for _, id := range s.OperationIDs() {
		op := s.Operations[id]
		if op.Finished() || len(op.Steps) == 0 || op.Steps[0].Group == "" {
			continue
		}
		out[op.Topic] = op
	}
	return out
}

// Shards made by add_shards get every group of every topic whose
// partitions they take before they serve: add_shards stores one
// seed-groups operation per such topic, with a register-group step per
// (new owner, group), and serve_shards waits for them.
func TestAddShardsSeedsGroupsBeforeServing(t *testing.T) {
	s := withGroups(t)
	before := ring.New(s.RingShards())
	ids := addShards(t, s, 4)
	after := ring.New(append(s.RingShards(), func() []uint64 {
		var out []uint64
		for _, id := range ids {
			out = append(out, uint64(id))
		}
		return out
	}()...))
	want := map[string][]EventShardID{}
	for _, name := range []string{"a", "b"} {
		for p := range s.Topics[name].Partitions {
			if from, to := before.Locate(name, p), after.Locate(name, p); from != to {
				want[name] = append(want[name], EventShardID(to))
			}
		}
		slices.Sort(want[name])
		want[name] = slices.Compact(want[name])
	}
	if len(want["a"]) == 0 {
		t.Fatalf("no partition of topic a moves to the new shards %v: pick another count", ids)
	}
	seeds := unfinishedSeeds(s)
	for name, shards := range want {
		op := seeds[name]
		if op == nil {
			t.Fatalf("after add_shards: no operation registers the groups of topic %s on %v", name, shards)
		}
		var got []string
		for _, st := range op.Steps {
			if st.Kind != StepRegisterGroup || st.Rollback != RollbackRetry {
				t.Fatalf("seed step %+v: want register-group rolling forward", st)
			}
			got = append(got, fmt.Sprintf("%d/%s", st.Shard, st.Group))
		}
		var exp []string
		for _, id := range shards {
			for _, g := range s.Topics[name].Groups {
				exp = append(exp, fmt.Sprintf("%d/%s", id, g))
			}
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("topic %s seed steps (shard/group) = %v, want %v", name, got, exp)
		}
	}
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 500}); code != ResultBusy {
		t.Fatalf("serve_shards while seeding = %d, want ResultBusy", code)
	}
	if got := s.RingShards(); len(got) != 8 {
		t.Fatalf("RingShards() after a refused serve_shards = %v, want the 8 old shards", got)
	}
	for _, op := range seeds {
		runAll(t, s, op.ID)
	}
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 500}); code != ResultOK {
		t.Fatalf("serve_shards once seeded = %d, want ResultOK", code)
	}
}

// A topic being deleted is not seeded, nor the group an unfinished
// delete-group removes.
func TestAddShardsSeedsSkipDeletions(t *testing.T) {
	s := withGroups(t)
	if code, _ := submitAdminOp(t, s, NewDeleteGroup("a", "audit", []EventShardID{100}, time.Second), false); code != ResultOK {
		t.Fatalf("delete-group a/audit = %d", code)
	}
	if code, _ := submitAdminOp(t, s, NewDeleteTopic("b", []EventShardID{100}, time.Second), false); code != ResultOK {
		t.Fatalf("delete-topic b = %d", code)
	}
	addShards(t, s, 4)
	seeds := unfinishedSeeds(s)
	if op := seeds["b"]; op != nil {
		t.Fatalf("topic b being deleted got seed operation %v", op)
	}
	op := seeds["a"]
	if op == nil {
		t.Fatal("topic a got no seed operation")
	}
	for _, st := range op.Steps {
		if st.Group != DefaultGroup {
			t.Fatalf("seed step %+v: want only the default group (audit is being deleted)", st)
		}
	}
}

// An admin operation submitted with shards read before add_shards also
// covers the starting shards that will take the topic's partitions, and a
// submit while a hand-over is open covers both its ends: the meta state
// the operation runs under decides its shards, not the submitter's read.
func TestAdminStepsCoverStartingShardsAndHandovers(t *testing.T) {
	s := withGroups(t)
	old := topicOwners(s.RingShards(), "a", 16)
	ids := addShards(t, s, 4)
	for _, op := range unfinishedSeeds(s) {
		runAll(t, s, op.ID)
	}
	all := append(s.RingShards(), func() []uint64 {
		var out []uint64
		for _, id := range ids {
			out = append(out, uint64(id))
		}
		return out
	}()...)
	wantStarting := topicOwners(all, "a", 16)
	code, id := submitAdminOp(t, s, NewCreateGroup("a", "billing", old, time.Second), false)
	if code != ResultOK {
		t.Fatalf("create-group a/billing = %d", code)
	}
	got := stepShards(s.Operations[id])
	for _, sh := range append(slices.Clone(old), wantStarting...) {
		if !slices.Contains(got, sh) {
			t.Fatalf("create-group steps name shards %v, want every owner before %v and after %v the growth", got, old, wantStarting)
		}
	}
	runAll(t, s, id)
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 500}); code != ResultOK {
		t.Fatalf("serve_shards = %d", code)
	}
	if len(s.Handovers) == 0 {
		t.Fatal("no hand-over opened")
	}
	code, id = submitAdminOp(t, s, NewDeleteGroup("a", "billing", wantStarting[:1], time.Second), false)
	if code != ResultOK {
		t.Fatalf("delete-group a/billing = %d", code)
	}
	got = stepShards(s.Operations[id])
	for _, h := range s.Handovers {
		if h.Topic == "a" && (!slices.Contains(got, h.From) || !slices.Contains(got, h.To)) {
			t.Fatalf("delete-group steps name shards %v, want both ends of hand-over %+v", got, h)
		}
	}
}

func topicOwners(ringIDs []uint64, topic string, parts uint32) []EventShardID {
	r := ring.New(ringIDs)
	var out []EventShardID
	for p := range parts {
		out = append(out, EventShardID(r.Locate(topic, p)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func stepShards(op *Operation) []EventShardID {
	var out []EventShardID
	for _, st := range op.Steps {
		out = append(out, st.Shard)
	}
	return out
}

// A topic's partition count cannot change while shards are starting or
// while a partition of the topic hands over: the seeds and hand-overs were
// computed for the old count. Other settings can.
func TestUpdateTopicPartitionsWaitsForHandovers(t *testing.T) {
	s := withGroups(t)
	ids := addShards(t, s, 4)
	update := func(parts uint32, dedup int64) uint64 {
		tp := s.Topics["a"].Clone()
		tp.Partitions, tp.DedupWindowMs = parts, dedup
		c := &Command{Op: OpUpdateTopic, Topic: tp}
		code, _ := s.Apply(c)
		if code == ResultHandingOver && !errors.Is(ResultError(c, code), ErrHandingOver) {
			t.Fatalf("ResultError(update_topic, ResultHandingOver) = %v, want ErrHandingOver", ResultError(c, code))
		}
		return code
	}
	if code := update(32, 0); code != ResultHandingOver {
		t.Fatalf("update_topic partitions 16→32 while shards start = %d, want ResultHandingOver", code)
	}
	for _, op := range unfinishedSeeds(s) {
		runAll(t, s, op.ID)
	}
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 500}); code != ResultOK {
		t.Fatalf("serve_shards = %d", code)
	}
	if code := update(32, 0); code != ResultHandingOver {
		t.Fatalf("update_topic partitions 16→32 while hand-overs are open = %d, want ResultHandingOver", code)
	}
	if code := update(16, 5000); code != ResultOK {
		t.Fatalf("update_topic of another setting while hand-overs are open = %d, want ResultOK", code)
	}
	for _, h := range slices.Clone(s.Handovers) {
		s.Apply(&Command{Op: OpSealHandover, Name: h.Topic, Partition: h.Partition, NowMs: 600})
		s.Apply(&Command{Op: OpCloseHandover, Name: h.Topic, Partition: h.Partition})
	}
	if code := update(32, 5000); code != ResultOK {
		t.Fatalf("update_topic partitions once the hand-overs closed = %d, want ResultOK", code)
	}
}

// A retried add_shards (the same count while the growth it started is
// still starting or handing over: the caller timed out and asked again)
// answers that growth's shards; another count is refused until the growth
// ends, and afterwards the same count starts a new growth.
func TestAddShardsRetryAnswersTheGrowthInProgress(t *testing.T) {
	s := withGroups(t)
	ids := addShards(t, s, 4)
	again := func(n int) (uint64, []EventShardID) {
		code, data := s.Apply(&Command{Op: OpAddShards, Count: n})
		var got []EventShardID
		if len(data) > 0 {
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatalf("add_shards answer %q: %v", data, err)
			}
		}
		return code, got
	}
	if code, got := again(4); code != ResultNoop || !slices.Equal(got, ids) {
		t.Fatalf("add_shards 4 again while starting = %d, %v; want ResultNoop and %v", code, got, ids)
	}
	if code, _ := again(2); code != ResultExists {
		t.Fatalf("add_shards 2 while 4 start = %d, want ResultExists", code)
	}
	for _, op := range unfinishedSeeds(s) {
		runAll(t, s, op.ID)
	}
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 500}); code != ResultOK {
		t.Fatalf("serve_shards = %d", code)
	}
	if code, got := again(4); code != ResultNoop || !slices.Equal(got, ids) || len(s.Shards) != 12 {
		t.Fatalf("add_shards 4 again while handing over = %d, %v (%d shards); want ResultNoop, %v, 12 shards", code, got, len(s.Shards), ids)
	}
	for _, h := range slices.Clone(s.Handovers) {
		s.Apply(&Command{Op: OpSealHandover, Name: h.Topic, Partition: h.Partition, NowMs: 600})
		s.Apply(&Command{Op: OpCloseHandover, Name: h.Topic, Partition: h.Partition})
	}
	if code, got := again(4); code != ResultOK || slices.Equal(got, ids) || len(s.Shards) != 16 {
		t.Fatalf("add_shards 4 after the growth ended = %d, %v (%d shards); want a new growth to 16", code, got, len(s.Shards))
	}
}

// A group or topic change submitted while a topic's seed runs waits for it
// (ResultBusy with the seed's id), so a forget-group on a new shard can
// never run before the seed registers the group there; submitted again
// once the seed is done, its steps name the starting shards.
func TestAdminChangeWaitsForTheSeed(t *testing.T) {
	s := withGroups(t)
	ids := addShards(t, s, 4)
	seed := unfinishedSeeds(s)["a"]
	if seed == nil {
		t.Fatal("topic a got no seed operation")
	}
	for _, op := range []Operation{
		NewDeleteGroup("a", "audit", nil, time.Second),
		NewCreateGroup("a", "billing", nil, time.Second),
		NewDeleteTopic("a", nil, time.Second),
	} {
		if code, id := submitAdminOp(t, s, op, false); code != ResultBusy || id != seed.ID {
			t.Fatalf("%s while topic a seeds = %d, id %d; want ResultBusy with the seed %d", op.Kind, code, id, seed.ID)
		}
	}
	runAll(t, s, seed.ID)
	code, id := submitAdminOp(t, s, NewDeleteGroup("a", "audit", nil, time.Second), false)
	if code != ResultOK {
		t.Fatalf("delete-group after the seed = %d, want ResultOK", code)
	}
	got := stepShards(s.Operations[id])
	for _, sh := range seed.Steps {
		if !slices.Contains(got, sh.Shard) {
			t.Fatalf("delete-group steps name shards %v, want the seeded shard %d (starting: %v)", got, sh.Shard, ids)
		}
	}
}
