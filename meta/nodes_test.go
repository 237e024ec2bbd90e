package meta

import (
	"slices"
	"testing"
)

// nodesState is 3 bootstrapped nodes holding 2 shards of 3 replicas, and
// node 4, joined, holding nothing.
func nodesState(t *testing.T) *State {
	t.Helper()
	s := NewState()
	for i := NodeID(1); i <= 3; i++ {
		s.Apply(&Command{Op: OpRegisterNode, Node: &Node{ID: i, RaftAddr: "r", GRPCAddr: "g", MetaVoter: true}})
	}
	s.Apply(&Command{Op: OpBootstrapShards, Count: 2, RF: 3, ClusterID: "c1"})
	s.Apply(&Command{Op: OpJoinNode, Node: &Node{ID: 4, RaftAddr: "r4", GRPCAddr: "g4", Incarnation: "inc4"}})
	return s
}

func setState(id NodeID, to NodeState, force bool) *Command {
	return &Command{Op: OpSetNodeState, NodeID: id, NodeState: to, Force: force}
}

// set_node_state moves nodes along active → draining → removed (and back
// to active from draining), refuses removal while the node holds replicas
// or operations unless forced, refuses even a forced removal of the last
// live holder of a shard, and never moves a removed node again.
func TestSetNodeState(t *testing.T) {
	cases := []struct {
		name  string
		setup []*Command // applied first, each must not be refused
		c     *Command
		want  uint64
		state NodeState // node's state after c
	}{
		{name: "unknown node", c: setState(9, NodeDraining, false), want: ResultNotFound},
		{name: "drain an active node", c: setState(4, NodeDraining, false), want: ResultOK, state: NodeDraining},
		{name: "drain a draining node", setup: []*Command{setState(4, NodeDraining, false)}, c: setState(4, NodeDraining, false), want: ResultNoop, state: NodeDraining},
		{name: "undrain", setup: []*Command{setState(4, NodeDraining, false)}, c: setState(4, NodeActive, false), want: ResultOK, state: NodeActive},
		{name: "remove an active node without force", c: setState(4, NodeRemoved, false), want: ResultInvalid, state: NodeActive},
		{name: "remove a drained empty node", setup: []*Command{setState(4, NodeDraining, false)}, c: setState(4, NodeRemoved, false), want: ResultOK, state: NodeRemoved},
		{name: "remove a draining node holding replicas", setup: []*Command{setState(1, NodeDraining, false)}, c: setState(1, NodeRemoved, false), want: ResultHoldsReplicas, state: NodeDraining},
		{name: "force-remove a node holding replicas", setup: []*Command{setState(1, NodeDraining, false)}, c: setState(1, NodeRemoved, true), want: ResultOK, state: NodeRemoved},
		{name: "force-remove an active node (dead, unreachable)", c: setState(2, NodeRemoved, true), want: ResultOK, state: NodeRemoved},
		{
			name:  "force-remove the last live holder",
			setup: []*Command{setState(1, NodeRemoved, true), setState(2, NodeRemoved, true)},
			c:     setState(3, NodeRemoved, true), want: ResultHoldsReplicas, state: NodeActive,
		},
		{
			name:  "remove a node an unfinished move goes to",
			setup: []*Command{{Op: OpSubmitOperations, Operations: []Operation{NewMoveReplica(100, 1, 4, 0, "test", DefaultStepTimeouts())}}, setState(4, NodeDraining, false)},
			c:     setState(4, NodeRemoved, false), want: ResultHoldsReplicas, state: NodeDraining,
		},
		{name: "removal is final", setup: []*Command{setState(4, NodeDraining, false), setState(4, NodeRemoved, false)}, c: setState(4, NodeActive, false), want: ResultInvalid, state: NodeRemoved},
		{name: "remove a removed node", setup: []*Command{setState(4, NodeDraining, false), setState(4, NodeRemoved, false)}, c: setState(4, NodeRemoved, false), want: ResultNoop, state: NodeRemoved},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := nodesState(t)
			for _, c := range tc.setup {
				if code, _ := s.Apply(c); code != ResultOK {
					t.Fatalf("setup %s %+v = %d, want ResultOK", c.Op, c, code)
				}
			}
			before := s.Version
			code, _ := s.Apply(tc.c)
			if code != tc.want {
				t.Fatalf("set_node_state(%d, %s, force=%v) = %d, want %d", tc.c.NodeID, tc.c.NodeState, tc.c.Force, code, tc.want)
			}
			if changed := s.Version != before; changed != (code == ResultOK) {
				t.Fatalf("set_node_state answered %d but version %d -> %d", code, before, s.Version)
			}
			if n := s.Nodes[tc.c.NodeID]; n != nil && n.State != tc.state {
				t.Fatalf("node %d state = %s, want %s", tc.c.NodeID, n.State, tc.state)
			}
		})
	}
}

// A removed node stops voting, keeps its record (id and incarnation are
// never reused: a join under its id is refused) and cannot register again.
func TestRemovedNodeStaysRemoved(t *testing.T) {
	s := nodesState(t)
	s.Apply(setState(1, NodeRemoved, true))
	n := s.Nodes[1]
	if n == nil || n.State != NodeRemoved || n.MetaVoter {
		t.Fatalf("removed node 1 = %+v, want its record kept, removed, not a meta voter", n)
	}
	if code, _ := s.Apply(&Command{Op: OpRegisterNode, Node: &Node{ID: 1, RaftAddr: "r", GRPCAddr: "g", MetaVoter: true}}); code != ResultInvalid {
		t.Fatalf("register_node of a removed node = %d, want ResultInvalid", code)
	}
	if code, _ := s.Apply(&Command{Op: OpJoinNode, Node: &Node{ID: 1, RaftAddr: "r", GRPCAddr: "g", Incarnation: "new"}}); code != ResultExists {
		t.Fatalf("join_node under a removed id = %d, want ResultExists", code)
	}
	if code, _ := s.Apply(&Command{Op: OpSetMetaVoter, NodeID: 1, MetaVoter: true}); code != ResultInvalid {
		t.Fatalf("set_meta_voter of a removed node = %d, want ResultInvalid", code)
	}
	if got := s.MetaVoters(); !slices.Equal(got, []NodeID{2, 3}) {
		t.Fatalf("MetaVoters() = %v, want [2 3]", got)
	}
}

// A broker re-registers itself as it runs (its addresses may change): that
// must not undo a drain or a meta voter promotion.
func TestRegisterNodeKeepsStateAndVote(t *testing.T) {
	s := nodesState(t)
	s.Apply(setState(4, NodeDraining, false))
	s.Apply(&Command{Op: OpSetMetaVoter, NodeID: 4, MetaVoter: true})
	code, _ := s.Apply(&Command{Op: OpRegisterNode, Node: &Node{ID: 4, RaftAddr: "r4b", GRPCAddr: "g4", State: NodeActive, Incarnation: "inc4"}})
	if n := s.Nodes[4]; code != ResultOK || n.State != NodeDraining || !n.MetaVoter || n.RaftAddr != "r4b" {
		t.Fatalf("register_node = %d, node %+v; want the new address, still draining and a meta voter", code, n)
	}
}

// HoldingsOf names the shards and unfinished operations on a node and the
// shards it is the last live holder of.
func TestHoldingsOf(t *testing.T) {
	s := nodesState(t)
	s.Apply(&Command{Op: OpSubmitOperations, Operations: []Operation{NewMoveReplica(101, 2, 4, 0, "test", DefaultStepTimeouts())}})
	if h := s.HoldingsOf(4); len(h.Shards) != 0 || !slices.Equal(h.Operations, []OperationID{1}) {
		t.Fatalf("HoldingsOf(4) = %+v, want no shards and operation 1", h)
	}
	s.Apply(setState(1, NodeRemoved, true))
	s.Apply(setState(2, NodeRemoved, true))
	h := s.HoldingsOf(3)
	if !slices.Equal(h.Shards, []EventShardID{100, 101}) || !slices.Equal(h.LastHolder, []EventShardID{100, 101}) {
		t.Fatalf("HoldingsOf(3) = %+v, want shards and last holder of [100 101]", h)
	}
}
