package rebalance

import (
	"testing"

	"github.com/sundialmq/sundial/meta"
)

// unbalanced is 8 shards of 3 replicas on nodes 1-3 and a 4th node
// registered after the bootstrap.
func unbalanced(t *testing.T) *meta.State {
	t.Helper()
	s := meta.NewState()
	for i := meta.NodeID(1); i <= 3; i++ {
		s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: i}})
	}
	s.Apply(&meta.Command{Op: meta.OpBootstrapShards, Count: 8, RF: 3})
	s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: 4}})
	return s
}

// The plan for a 4th empty node moves replicas onto it until counts differ
// by at most one, each move fits the state (the meta state stores them
// all), and a second plan while they are unfinished adds nothing.
func TestPlanBalancesAnEmptyNode(t *testing.T) {
	s := unbalanced(t)
	ops := Plan(s, nil, Options{})
	if len(ops) == 0 {
		t.Fatal("Plan() = no operations, want moves to node 4")
	}
	for _, op := range ops {
		if op.Kind != meta.OpKindMoveReplica || op.To != 4 {
			t.Fatalf("operation %v, want moves to node 4", op)
		}
	}
	if code, _ := s.Apply(&meta.Command{Op: meta.OpSubmitOperations, Operations: ops}); code != meta.ResultOK || len(s.Unfinished()) != len(ops) {
		t.Fatalf("submit = %d, stored %d of %d", code, len(s.Unfinished()), len(ops))
	}
	if again := Plan(s, nil, Options{}); len(again) != 0 {
		t.Fatalf("Plan() with the moves in progress = %v, want nothing", again)
	}
	// Run every operation's steps: the cluster is then balanced.
	for _, op := range s.Unfinished() {
		for i := range op.Steps {
			s.Apply(&meta.Command{Op: meta.OpAdvanceOperation, OperationID: op.ID, Step: i})
		}
	}
	count := map[meta.NodeID]int{}
	for _, sh := range s.Shards {
		for _, r := range sh.Replicas {
			count[r.Node]++
		}
	}
	lo, hi := 1<<30, 0
	for n := meta.NodeID(1); n <= 4; n++ {
		lo, hi = min(lo, count[n]), max(hi, count[n])
	}
	if hi-lo > 1 {
		t.Fatalf("replicas per node = %v, want max-min <= 1", count)
	}
	if again := Plan(s, nil, Options{}); len(again) != 0 && again[0].Kind != meta.OpKindTransferLeader {
		t.Fatalf("Plan() on a balanced cluster = %v, want no replica moves", again)
	}
}

// A node the meta state declares dead is dead to the planner: each of its
// replicas is re-created on the live node without one (add-replica from
// the dead node), and nothing else is planned first.
func TestPlanRepairsADeadNode(t *testing.T) {
	s := unbalanced(t)
	s.Apply(&meta.Command{Op: meta.OpDeclareDead, NodeID: 2})
	ops := Plan(s, nil, Options{MaxOperations: 100})
	if len(ops) != 8 {
		t.Fatalf("Plan() = %d operations, want 8 repairs", len(ops))
	}
	for _, op := range ops {
		if op.Kind != meta.OpKindAddReplica || op.From != 2 || op.To != 4 || op.Reason != ReasonRepair {
			t.Fatalf("operation %v, want add-replica from dead node 2 to node 4 (repair)", op)
		}
	}
}

// A node force-removed while it held replicas is planned as dead: every
// replica it held is re-created on a live node.
func TestPlanRecreatesReplicasOfAForceRemovedNode(t *testing.T) {
	s := unbalanced(t)
	if code, _ := s.Apply(&meta.Command{Op: meta.OpSetNodeState, NodeID: 1, NodeState: meta.NodeRemoved, Force: true}); code != meta.ResultOK {
		t.Fatalf("force-remove node 1 = %d, want ResultOK", code)
	}
	held := len(s.HoldingsOf(1).Shards)
	ops := Plan(s, nil, Options{})
	repairs := 0
	for _, op := range ops {
		if op.Kind == meta.OpKindAddReplica && op.From == 1 && op.To == 4 {
			repairs++
		}
	}
	if repairs != held {
		t.Fatalf("Plan() = %v, want %d add-replica operations from node 1 to node 4", ops, held)
	}
}

// A node the meta leader has not heard from lately (Options.Unavailable)
// is no target: with node 4 down and node 5 up, both empty, every move goes
// to node 5. An unavailable node that holds replicas keeps them: no
// operation moves a replica or a leadership off node 3 either, and its
// replicas still count, so nothing is repaired.
func TestPlanSkipsUnavailableNodes(t *testing.T) {
	s := unbalanced(t)
	s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: 5}})
	leaders := map[meta.EventShardID]meta.NodeID{}
	for i, id := range s.ShardIDs() {
		leaders[id] = meta.NodeID(i%3 + 1)
	}
	ops := Plan(s, leaders, Options{MaxOperations: 100, Unavailable: map[meta.NodeID]bool{3: true, 4: true}})
	if len(ops) == 0 {
		t.Fatal("Plan() = no operations, want moves to node 5")
	}
	for _, op := range ops {
		if op.To != 5 || op.From == 3 || op.Reason == ReasonRepair {
			t.Fatalf("operation %v, want only moves to node 5, none off node 3, no repair", op)
		}
	}
}

// A drain with an unavailable empty node moves the draining node's
// replicas to the available one only.
func TestDrainSkipsUnavailableNodes(t *testing.T) {
	s := unbalanced(t)
	s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: 5}})
	if code, _ := s.Apply(&meta.Command{Op: meta.OpSetNodeState, NodeID: 1, NodeState: meta.NodeDraining}); code != meta.ResultOK {
		t.Fatalf("drain node 1 = %d, want ResultOK", code)
	}
	ops := Plan(s, nil, Options{MaxOperations: 100, Unavailable: map[meta.NodeID]bool{4: true}})
	drains := 0
	for _, op := range ops {
		if op.To == 4 {
			t.Fatalf("operation %v targets unavailable node 4", op)
		}
		if op.Reason == "drain" && op.From == 1 {
			drains++
		}
	}
	if drains == 0 {
		t.Fatalf("Plan() = %v, want drain moves off node 1", ops)
	}
}
