package meta

import "testing"

// declare_dead and declare_alive move a node between active and dead, each
// change once (a retried proposal is a no-op and keeps the version), and a
// dead node that registers again (its broker restarted, or it still runs
// but the meta leader cannot reach it) stays dead until declare_alive.
func TestDeclareDeadAndAlive(t *testing.T) {
	m := bootstrapped(t)
	s := state(t, m)
	steps := []struct {
		name  string
		c     *Command
		code  uint64
		state NodeState
	}{
		{"declare dead", &Command{Op: OpDeclareDead, NodeID: 2}, ResultOK, NodeDead},
		{"declare dead again", &Command{Op: OpDeclareDead, NodeID: 2}, ResultNoop, NodeDead},
		{"re-register while dead", &Command{Op: OpRegisterNode, Node: &Node{ID: 2, RaftAddr: "r", GRPCAddr: "g", State: NodeActive, MetaVoter: true}}, ResultNoop, NodeDead},
		{"re-register on a new address", &Command{Op: OpRegisterNode, Node: &Node{ID: 2, RaftAddr: "r", GRPCAddr: "g2", State: NodeActive, MetaVoter: true}}, ResultOK, NodeDead},
		{"declare alive", &Command{Op: OpDeclareAlive, NodeID: 2}, ResultOK, NodeActive},
		{"declare alive again", &Command{Op: OpDeclareAlive, NodeID: 2}, ResultNoop, NodeActive},
	}
	for _, st := range steps {
		v := s.Version
		code, _ := s.Apply(st.c)
		if code != st.code || s.Nodes[2].State != st.state {
			t.Fatalf("%s: Apply = %d, node state %q; want %d, %q", st.name, code, s.Nodes[2].State, st.code, st.state)
		}
		if changed := s.Version != v; changed != (code == ResultOK) {
			t.Fatalf("%s: version %d -> %d with result %d", st.name, v, s.Version, code)
		}
	}
	if code, _ := s.Apply(&Command{Op: OpDeclareDead, NodeID: 9}); code != ResultNotFound {
		t.Fatalf("declare_dead(unknown node) = %d, want ResultNotFound", code)
	}
	s.Nodes[3].State = NodeRemoved
	if code, _ := s.Apply(&Command{Op: OpDeclareDead, NodeID: 3}); code != ResultInvalid || s.Nodes[3].State != NodeRemoved {
		t.Fatalf("declare_dead(removed node) = %d, state %q; want ResultInvalid, removed", code, s.Nodes[3].State)
	}
}

// The commands go through the state machine's decoder: a declaration
// without a node id is malformed.
func TestDeclareDeadNeedsANode(t *testing.T) {
	for _, op := range []Op{OpDeclareDead, OpDeclareAlive} {
		if _, err := DecodeCommand((&Command{Op: op}).Encode()); err == nil {
			t.Fatalf("DecodeCommand(%s without node) = nil error, want ErrMalformedCommand", op)
		}
		c, err := DecodeCommand((&Command{Op: op, NodeID: 4}).Encode())
		if err != nil || c.NodeID != 4 {
			t.Fatalf("DecodeCommand(%s node 4) = %+v, %v", op, c, err)
		}
	}
}

// A node declared dead while draining comes back draining: healing's
// declare_alive restores the state the node had, so a drain an operator
// started is not lost to a crash (the planner keeps moving replicas off
// it, remove-node still accepts it). An active node comes back active.
func TestDeclareAliveRestoresTheStateBeforeDeath(t *testing.T) {
	for _, before := range []NodeState{NodeDraining, NodeActive} {
		t.Run(string(before), func(t *testing.T) {
			s := state(t, bootstrapped(t))
			if before == NodeDraining {
				if code, _ := s.Apply(&Command{Op: OpSetNodeState, NodeID: 2, NodeState: NodeDraining}); code != ResultOK {
					t.Fatalf("drain node 2 = %d", code)
				}
			}
			for _, c := range []*Command{
				{Op: OpDeclareDead, NodeID: 2},
				{Op: OpRegisterNode, Node: &Node{ID: 2, RaftAddr: "r", GRPCAddr: "g", State: NodeActive, MetaVoter: true}},
				{Op: OpDeclareAlive, NodeID: 2},
			} {
				if code, _ := s.Apply(c); code != ResultOK && code != ResultNoop {
					t.Fatalf("%s = %d", c.Op, code)
				}
			}
			if got := s.Nodes[2].State; got != before {
				t.Fatalf("node 2 after dead and alive = %q, want %q (its state before it died)", got, before)
			}
			// Dead again later, from that state: the record does not keep
			// an older one.
			s.Apply(&Command{Op: OpDeclareDead, NodeID: 2})
			if before == NodeDraining {
				s.Apply(&Command{Op: OpDeclareAlive, NodeID: 2})
				s.Apply(&Command{Op: OpSetNodeState, NodeID: 2, NodeState: NodeActive})
				s.Apply(&Command{Op: OpDeclareDead, NodeID: 2})
			}
			s.Apply(&Command{Op: OpDeclareAlive, NodeID: 2})
			if got := s.Nodes[2].State; got != NodeActive {
				t.Fatalf("node 2 undrained, dead and alive = %q, want active", got)
			}
		})
	}
}
