package meta

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// fourNodes is a bootstrapped 3-node cluster with a 4th node registered
// after the bootstrap, so it holds no replica.
func fourNodes(t *testing.T) (*State, EventShardID) {
	t.Helper()
	m := bootstrapped(t)
	apply(t, m, 5, &Command{Op: OpRegisterNode, Node: &Node{ID: 4, RaftAddr: "r4", GRPCAddr: "g4"}})
	s := state(t, m)
	return s, s.ShardIDs()[0]
}

func submit(t *testing.T, s *State, ops ...Operation) []OperationID {
	t.Helper()
	code, data := s.Apply(&Command{Op: OpSubmitOperations, Operations: ops, NowMs: 1000})
	if code == ResultNoop {
		return nil
	}
	if code != ResultOK {
		t.Fatalf("submit = %d, want ResultOK", code)
	}
	var ids []OperationID
	if err := json.Unmarshal(data, &ids); err != nil {
		t.Fatalf("submit data %q: %v", data, err)
	}
	return ids
}

func nodesOf(sh *Shard) []NodeID {
	var ns []NodeID
	for _, r := range sh.Replicas {
		ns = append(ns, r.Node)
	}
	return ns
}

// A submitted move gets an operation id and a replica id from the
// counters; its steps change the placement as they complete: the new
// replica (marked Join) appears after add-learner, the old one disappears
// after remove-replica, and the operation is done after its last step.
func TestSubmitAndAdvanceMove(t *testing.T) {
	s, shard := fourNodes(t)
	from := s.Shards[shard].Replicas[0].Node
	nextReplica := s.NextReplicaID
	ids := submit(t, s, NewMoveReplica(shard, from, 4, 0, "balance", DefaultStepTimeouts()))
	if !reflect.DeepEqual(ids, []OperationID{1}) {
		t.Fatalf("ids = %v, want [1]", ids)
	}
	op := s.Operations[1]
	if op.NewReplica != nextReplica || s.NextReplicaID != nextReplica+1 || op.Status != OperationPending || op.CreatedAtMs != 1000 {
		t.Fatalf("stored %+v (next replica %d), want new replica %d, pending, created at 1000", op, s.NextReplicaID, nextReplica)
	}
	// The same plan again (a retried proposal) stores nothing: the shard is busy.
	if again := submit(t, s, NewMoveReplica(shard, from, 4, 0, "balance", DefaultStepTimeouts())); again != nil {
		t.Fatalf("second submit stored %v, want nothing", again)
	}
	if code, _ := s.Apply(&Command{Op: OpStartOperation, OperationID: 1, NowMs: 2000}); code != ResultOK {
		t.Fatalf("start = %d", code)
	}
	for i := range op.Steps {
		// A stale advance (of a step already done) changes nothing.
		if i > 0 {
			if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: 1, Step: i - 1}); code != ResultNoop {
				t.Fatalf("stale advance of step %d = %d, want ResultNoop", i-1, code)
			}
		}
		if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: 1, Step: i, NowMs: 3000}); code != ResultOK {
			t.Fatalf("advance step %d = %d", i, code)
		}
		sh := s.Shards[shard]
		r4, on4 := sh.ReplicaOn(4)
		_, onFrom := sh.ReplicaOn(from)
		switch op.Steps[i].Kind {
		case StepAddLearner:
			if !on4 || r4.ID != nextReplica || !r4.Join || !onFrom {
				t.Fatalf("after add-learner replicas = %+v, want replica %d joining on node 4 and node %d kept", sh.Replicas, nextReplica, from)
			}
		case StepRemoveReplica:
			if onFrom || !on4 || len(sh.Replicas) != 3 {
				t.Fatalf("after remove-replica replicas = %+v, want node %d gone, 3 left", sh.Replicas, from)
			}
		}
	}
	if op.Status != OperationDone || op.StartedAtMs != 2000 || op.FinishedAtMs != 3000 {
		t.Fatalf("operation = %+v, want done, started 2000, finished 3000", op)
	}
	if len(s.Unfinished()) != 0 {
		t.Fatalf("unfinished = %v, want none", s.Unfinished())
	}
}

// A rolled-back move takes its new replica out of the placement and
// leaves the shard's replicas as they were; a roll back after the old
// replica was removed is refused.
func TestRollbackRemovesNewReplica(t *testing.T) {
	s, shard := fourNodes(t)
	before := nodesOf(s.Shards[shard])
	from := before[0]
	submit(t, s, NewMoveReplica(shard, from, 4, 0, "balance", DefaultStepTimeouts()))
	s.Apply(&Command{Op: OpAdvanceOperation, OperationID: 1, Step: 0})
	if code, _ := s.Apply(&Command{Op: OpFinishOperation, OperationID: 1, Status: OperationRolledBack, Error: "catch-up timed out"}); code != ResultOK {
		t.Fatalf("roll back = %d", code)
	}
	if got := nodesOf(s.Shards[shard]); !reflect.DeepEqual(got, before) {
		t.Fatalf("replicas after roll back = %v, want %v", got, before)
	}
	if op := s.Operations[1]; op.Status != OperationRolledBack || op.Error != "catch-up timed out" {
		t.Fatalf("operation = %+v, want rolled-back with its error", op)
	}
	// The shard is free again; a second move runs to its remove step.
	submit(t, s, NewMoveReplica(shard, from, 4, 0, "balance", DefaultStepTimeouts()))
	for i := 0; i < 4; i++ { // add, catch up, promote, remove
		s.Apply(&Command{Op: OpAdvanceOperation, OperationID: 2, Step: i})
	}
	if code, _ := s.Apply(&Command{Op: OpFinishOperation, OperationID: 2, Status: OperationRolledBack}); code != ResultInvalid {
		t.Fatalf("roll back after remove = %d, want ResultInvalid", code)
	}
}

// Operations that no longer fit the state are skipped, the others stored.
func TestSubmitSkipsOperationsThatDoNotFit(t *testing.T) {
	s, shard := fourNodes(t)
	on := nodesOf(s.Shards[shard])
	ids := submit(t, s,
		NewMoveReplica(shard, on[0], on[1], 0, "to a holder", DefaultStepTimeouts()),
		NewMoveReplica(999, on[0], 4, 0, "no such shard", DefaultStepTimeouts()),
		NewMoveReplica(shard, 4, on[0], 0, "from a non-holder", DefaultStepTimeouts()),
		NewMoveReplica(shard, on[0], 9, 0, "to an unknown node", DefaultStepTimeouts()),
		NewMoveReplica(shard, on[0], 4, 0, "fits", DefaultStepTimeouts()),
	)
	if len(ids) != 1 || s.Operations[ids[0]].Reason != "fits" {
		t.Fatalf("stored %v, want only the operation that fits", ids)
	}
}

// Operations survive a snapshot and a JSON round trip of the command.
func TestOperationsSnapshotAndCommandRoundTrip(t *testing.T) {
	m := bootstrapped(t)
	apply(t, m, 5, &Command{Op: OpRegisterNode, Node: &Node{ID: 4, RaftAddr: "r4", GRPCAddr: "g4"}})
	shard := state(t, m).ShardIDs()[0]
	from := state(t, m).Shards[shard].Replicas[0].Node
	c := &Command{Op: OpSubmitOperations, Operations: []Operation{NewMoveReplica(shard, from, 4, 0, "balance", DefaultStepTimeouts())}}
	got, err := DecodeCommand(c.Encode())
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("DecodeCommand(Encode()) = %+v, %v; want %+v", got, err, c)
	}
	apply(t, m, 6, c)
	apply(t, m, 7, &Command{Op: OpAdvanceOperation, OperationID: 1, Step: 0})
	var buf bytes.Buffer
	if err := m.SaveSnapshot(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	other := NewStateMachine(nil)(ShardID, 2)
	if err := other.RecoverFromSnapshot(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	if a, b := state(t, m), state(t, other); !reflect.DeepEqual(a, b) {
		t.Fatalf("recovered state differs:\n%+v\n%+v", a.Operations[1], b.Operations[1])
	}
	if op := state(t, other).Operations[1]; op.Current != 1 || op.Status != OperationRunning {
		t.Fatalf("recovered operation = %+v, want running at step 1", op)
	}
}

func TestOperationCommandsNeedTheirFields(t *testing.T) {
	for _, c := range []*Command{
		{Op: OpSubmitOperations},
		{Op: OpAdvanceOperation},
		{Op: OpAdvanceOperation, OperationID: 1, Step: -1},
		{Op: OpFinishOperation, OperationID: 1, Status: OperationDone},
	} {
		if _, err := DecodeCommand(c.Encode()); err == nil {
			t.Errorf("DecodeCommand(%+v) = nil error, want malformed", c)
		}
	}
}
