package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// withTopic is a bootstrapped cluster with topic "orders".
func withTopic(t *testing.T) *State {
	t.Helper()
	s := state(t, bootstrapped(t))
	if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders", Partitions: 4}}); code != ResultOK {
		t.Fatalf("create topic = %d", code)
	}
	return s
}

// submitAdminOp applies submit_admin and answers the code and the id its
// data names (0 without data).
func submitAdminOp(t *testing.T, s *State, op Operation, ifNotExists bool) (uint64, OperationID) {
	t.Helper()
	c := &Command{Op: OpSubmitAdmin, Operations: []Operation{op}, IfNotExists: ifNotExists, NowMs: 2000}
	if _, err := DecodeCommand(c.Encode()); err != nil {
		t.Fatalf("DecodeCommand(submit_admin %s) = %v", op.Kind, err)
	}
	code, data := s.Apply(c)
	var id OperationID
	if len(data) > 0 {
		if err := json.Unmarshal(data, &id); err != nil {
			t.Fatalf("submit_admin data %q: %v", data, err)
		}
	}
	return code, id
}

// runAll advances every step of operation id, as the executor does.
func runAll(t *testing.T, s *State, id OperationID) {
	t.Helper()
	if code, _ := s.Apply(&Command{Op: OpStartOperation, OperationID: id}); code != ResultOK {
		t.Fatalf("start %d = %d", id, code)
	}
	for i := range s.Operations[id].Steps {
		if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: i, NowMs: 3000}); code != ResultOK {
			t.Fatalf("advance %d step %d = %d", id, i, code)
		}
	}
	if op := s.Operations[id]; op.Status != OperationDone {
		t.Fatalf("operation %d after its steps = %s, want done", id, op.Status)
	}
}

var twoShards = []EventShardID{101, 100, 101}

// A create-group adds the group at once and names one register step per
// shard (deduplicated, ascending); a retry while it runs answers the same
// operation; another change of the topic meanwhile is busy with its id.
func TestCreateGroupOperation(t *testing.T) {
	s := withTopic(t)
	v := s.Version
	code, id := submitAdminOp(t, s, NewCreateGroup("orders", "billing", twoShards, time.Second), false)
	if code != ResultOK || id != 1 {
		t.Fatalf("submit create-group = %d, id %d, want ResultOK, id 1", code, id)
	}
	op := s.Operations[id]
	var want []Step
	for _, sh := range withSubmitted(s.adminShards("orders"), 100, 101) {
		want = append(want, Step{Kind: StepRegisterGroup, Shard: sh, TimeoutMs: 1000, Rollback: RollbackRetry})
	}
	if !slices.Equal(op.Steps, want) || op.Shard != 0 || op.Status != OperationPending || op.CreatedAtMs != 2000 {
		t.Fatalf("stored %+v, want register steps %v (the submitted shards 100, 101 and the topic's own), no shard of its own, pending", op, want)
	}
	if !slices.Contains(s.Topics["orders"].Groups, "billing") || s.Version <= v {
		t.Fatalf("groups = %v (version %d → %d), want billing added at submit", s.Topics["orders"].Groups, v, s.Version)
	}
	if code, again := submitAdminOp(t, s, NewCreateGroup("orders", "billing", twoShards, time.Second), false); code != ResultNoop || again != id {
		t.Fatalf("retried create-group = %d, id %d, want ResultNoop and the running %d", code, again, id)
	}
	if code, busy := submitAdminOp(t, s, NewCreateGroup("orders", "audit", twoShards, time.Second), false); code != ResultBusy || busy != id {
		t.Fatalf("create-group audit meanwhile = %d, id %d, want ResultBusy with %d", code, busy, id)
	}
	if got := s.UnfinishedMoves(); len(got) != 0 {
		t.Fatalf("UnfinishedMoves() = %v, want none: admin operations do not hold up a rebalance", got)
	}
	if len(s.Unfinished()) != 1 || s.busy(100) {
		t.Fatal("the create-group is not unfinished, or it made shard 100 busy for moves")
	}
	runAll(t, s, id)
	if code, _ := submitAdminOp(t, s, NewCreateGroup("orders", "billing", twoShards, time.Second), false); code != ResultExists {
		t.Fatalf("create-group of an existing group = %d, want ResultExists", code)
	}
	if code, again := submitAdminOp(t, s, NewCreateGroup("orders", "billing", twoShards, time.Second), true); code != ResultOK || again == id {
		t.Fatalf("create-group if-not-exists of an existing group = %d, id %d, want a new operation that registers it again", code, again)
	}
	if code, _ := submitAdminOp(t, s, NewCreateGroup("missing", "g", twoShards, time.Second), false); code != ResultNotFound {
		t.Fatalf("create-group on a missing topic = %d, want ResultNotFound", code)
	}
}

// A delete-topic marks the topic deleting: creating it again, its groups
// and updates are refused until its last step, which removes the topic;
// then it can be created afresh.
func TestDeleteTopicOperation(t *testing.T) {
	s := withTopic(t)
	code, id := submitAdminOp(t, s, NewDeleteTopic("orders", twoShards, time.Second), false)
	if code != ResultOK || s.Topics["orders"] == nil || s.Topics["orders"].Deleting != id {
		t.Fatalf("submit delete-topic = %d; topic %+v, want ResultOK and the topic kept, deleting %d", code, s.Topics["orders"], id)
	}
	refused := []*Command{
		{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}},
		{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}, IfNotExists: true},
		{Op: OpUpdateTopic, Topic: &Topic{Name: "orders", Partitions: 4}},
		{Op: OpCreateGroup, Name: "orders", Group: "g", IfNotExists: true},
		{Op: OpDeleteGroup, Name: "orders", Group: DefaultGroup},
		{Op: OpSubmitAdmin, Operations: []Operation{NewCreateGroup("orders", "g", twoShards, time.Second)}},
	}
	for _, c := range refused {
		code, _ := s.Apply(c)
		if err := ResultError(c, code); code != ResultDeleting || !errors.Is(err, ErrBeingDeleted) {
			t.Errorf("%s while deleting = %d (%v), want ResultDeleting", c.Op, code, err)
		}
	}
	if code, again := submitAdminOp(t, s, NewDeleteTopic("orders", twoShards, time.Second), false); code != ResultNoop || again != id {
		t.Fatalf("retried delete-topic = %d, id %d, want ResultNoop and %d", code, again, id)
	}
	if code, _ := s.Apply(&Command{Op: OpStartOperation, OperationID: id}); code != ResultOK {
		t.Fatalf("start = %d", code)
	}
	if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: 0}); code != ResultOK || s.Topics["orders"] == nil {
		t.Fatalf("first step = %d, topic %v: want the topic kept until the last step", code, s.Topics["orders"])
	}
	last := len(s.Operations[id].Steps) - 1
	for i := 1; i < last; i++ {
		if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: i}); code != ResultOK || s.Topics["orders"] == nil {
			t.Fatalf("step %d = %d, topic %v: want the topic kept until the last step", i, code, s.Topics["orders"])
		}
	}
	if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: last, NowMs: 5000}); code != ResultOK || s.Topics["orders"] != nil {
		t.Fatalf("last step = %d, topic %v: want the topic gone", code, s.Topics["orders"])
	}
	if op := s.Operations[id]; op.Status != OperationDone || op.FinishedAtMs != 5000 {
		t.Fatalf("operation = %+v, want done at 5000", op)
	}
	if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}, NowMs: 6000}); code != ResultOK || s.Topics["orders"].Deleting != 0 {
		t.Fatalf("create after delete = %d, %+v, want a fresh topic", code, s.Topics["orders"])
	}
	if code, _ := submitAdminOp(t, s, NewDeleteTopic("nope", twoShards, time.Second), false); code != ResultNotFound {
		t.Fatalf("delete-topic of a missing topic = %d, want ResultNotFound", code)
	}
}

// A delete-group keeps the group until its last step; the default group
// and a missing group are refused; a topic with no shards completes at
// submit.
func TestDeleteGroupOperation(t *testing.T) {
	s := withTopic(t)
	_, cg := submitAdminOp(t, s, NewCreateGroup("orders", "billing", twoShards, time.Second), false)
	runAll(t, s, cg)
	code, id := submitAdminOp(t, s, NewDeleteGroup("orders", "billing", twoShards, time.Second), false)
	if code != ResultOK || !slices.Contains(s.Topics["orders"].Groups, "billing") {
		t.Fatalf("submit delete-group = %d, groups %v, want ResultOK and billing kept while it runs", code, s.Topics["orders"].Groups)
	}
	runAll(t, s, id)
	if slices.Contains(s.Topics["orders"].Groups, "billing") {
		t.Fatalf("groups after delete-group = %v, want billing gone", s.Topics["orders"].Groups)
	}
	for _, tt := range []struct {
		group string
		want  uint64
	}{{"billing", ResultNotFound}, {DefaultGroup, ResultInvalid}} {
		if code, _ := submitAdminOp(t, s, NewDeleteGroup("orders", tt.group, twoShards, time.Second), false); code != tt.want {
			t.Errorf("delete-group %s = %d, want %d", tt.group, code, tt.want)
		}
	}
	code, id = submitAdminOp(t, s, NewDeleteTopic("orders", nil, time.Second), false)
	if got, want := stepShards(s.Operations[id]), s.adminShards("orders"); code != ResultOK || !slices.Equal(got, want) {
		t.Fatalf("delete-topic submitted with no shards = %d, steps on %v, want steps on the topic's shards %v", code, got, want)
	}
}

// A delete-topic of a topic no shard holds (before the bootstrap) is done
// at submit.
func TestDeleteTopicWithoutShards(t *testing.T) {
	s := NewState()
	if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}}); code != ResultOK {
		t.Fatalf("create topic = %d", code)
	}
	code, id := submitAdminOp(t, s, NewDeleteTopic("orders", nil, time.Second), false)
	if code != ResultOK || s.Operations[id].Status != OperationDone || s.Topics["orders"] != nil {
		t.Fatalf("delete-topic with no shards = %d, %+v, want done at once and the topic gone", code, s.Operations[id])
	}
}

// withSubmitted is shards with extra added, ascending, without repeats.
func withSubmitted(shards []EventShardID, extra ...EventShardID) []EventShardID {
	out := append(slices.Clone(shards), extra...)
	slices.Sort(out)
	return slices.Compact(out)
}

// An abandoned delete-topic (finished failed) unmarks the topic; submit
// operations never store admin kinds, and submit_admin refuses others.
func TestAdminOperationEdges(t *testing.T) {
	s := withTopic(t)
	_, id := submitAdminOp(t, s, NewDeleteTopic("orders", twoShards, time.Second), false)
	if code, _ := s.Apply(&Command{Op: OpFinishOperation, OperationID: id, Status: OperationFailed, Error: "given up"}); code != ResultOK {
		t.Fatalf("finish = %d", code)
	}
	if s.Topics["orders"] == nil || s.Topics["orders"].Deleting != 0 {
		t.Fatalf("topic after an abandoned delete = %+v, want kept and usable", s.Topics["orders"])
	}
	if code, _ := s.Apply(&Command{Op: OpSubmitOperations, Operations: []Operation{NewCreateGroup("orders", "g", twoShards, time.Second)}}); code != ResultNoop {
		t.Fatalf("submit_operations of an admin operation = %d, want ResultNoop", code)
	}
	bad := &Command{Op: OpSubmitAdmin, Operations: []Operation{NewTransferLeader(100, 1, 2, "x", DefaultStepTimeouts())}}
	if _, err := DecodeCommand(bad.Encode()); !errors.Is(err, ErrMalformedCommand) {
		t.Fatalf("DecodeCommand(submit_admin of a transfer) = %v, want ErrMalformedCommand", err)
	}
	if code, _ := s.Apply(bad); code != ResultInvalid {
		t.Fatalf("submit_admin of a transfer = %d, want ResultInvalid", code)
	}
	if got := NewCreateGroup("orders", "g", twoShards, time.Second).String(); got != "create-group (topic orders group g): register-group shard 100, register-group shard 101" {
		t.Errorf("String() = %q", got)
	}
}

// A topic created with groups stores, in the same entry, the create-topic
// operation registering each group but the default one on every shard of
// the topic; the groups are listed at once; another change of the topic
// waits for it (busy) and a submit of the kind itself is refused. A topic
// created with the default group only stores none.
func TestCreateTopicRegistersItsGroups(t *testing.T) {
	s := state(t, bootstrapped(t))
	code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders", Partitions: 8, Groups: []string{"audit", "billing"}}, NowMs: 1000})
	if code != ResultOK {
		t.Fatalf("create topic with groups = %d, want ResultOK", code)
	}
	if got, want := s.Topics["orders"].Groups, []string{"audit", "billing", DefaultGroup}; !slices.Equal(got, want) {
		t.Fatalf("groups = %v, want %v", got, want)
	}
	op := s.TopicGroupsOperation("orders")
	if op == nil || op.Kind != OpKindCreateTopic || op.Finished() || op.Group != "" {
		t.Fatalf("TopicGroupsOperation(orders) = %+v, want an unfinished create-topic", op)
	}
	shards := s.adminShards("orders")
	var want []string
	for _, id := range shards {
		want = append(want, fmt.Sprint(id, "/audit"), fmt.Sprint(id, "/billing"))
	}
	var got []string
	for _, st := range op.Steps {
		if st.Kind != StepRegisterGroup || st.Rollback != RollbackRetry {
			t.Fatalf("step %+v, want register-group rolling forward", st)
		}
		got = append(got, fmt.Sprint(st.Shard, "/", st.Group))
	}
	if len(shards) < 2 || !slices.Equal(got, want) {
		t.Fatalf("steps = %v, want %v (every shard of the topic, each group)", got, want)
	}
	if code, id := submitAdminOp(t, s, NewCreateGroup("orders", "late", shards, time.Second), false); code != ResultBusy || id != op.ID {
		t.Fatalf("create-group while the topic's groups register = %d (id %d), want ResultBusy with %d", code, id, op.ID)
	}
	if code, _ := submitAdminOp(t, s, Operation{Kind: OpKindCreateTopic, Topic: "orders", Group: "x"}, false); code != ResultInvalid {
		t.Fatalf("submit_admin create-topic = %d, want ResultInvalid", code)
	}
	runAll(t, s, op.ID)

	if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "plain", Groups: []string{DefaultGroup}}}); code != ResultOK {
		t.Fatalf("create topic plain = %d", code)
	}
	if op := s.TopicGroupsOperation("plain"); op != nil {
		t.Fatalf("TopicGroupsOperation(plain) = %+v, want none for the default group only", op)
	}
}
