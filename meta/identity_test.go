package meta

import "testing"

func TestRegisterNodeKeepsItsIncarnation(t *testing.T) {
	m := NewStateMachine(nil)(ShardID, 1)
	node := func(inc, addr string) *Command {
		return &Command{Op: OpRegisterNode, Node: &Node{ID: 3, RaftAddr: addr, GRPCAddr: "g", MetaVoter: true, State: NodeActive, Incarnation: inc}}
	}
	steps := []struct {
		name string
		cmd  *Command
		want uint64
		inc  string
	}{
		{"a record without incarnation takes one", node("", "r"), ResultOK, ""},
		{"legacy record adopted", node("aaaa", "r"), ResultOK, "aaaa"},
		{"same incarnation changes its address", node("aaaa", "r2"), ResultOK, "aaaa"},
		{"same incarnation, same record", node("aaaa", "r2"), ResultNoop, "aaaa"},
		{"another incarnation is refused", node("bbbb", "r2"), ResultExists, "aaaa"},
		{"no incarnation is refused", node("", "r2"), ResultExists, "aaaa"},
	}
	for i, s := range steps {
		if got := apply(t, m, uint64(i+1), s.cmd).Value; got != s.want {
			t.Errorf("%s: register_node = %d, want %d", s.name, got, s.want)
		}
		if got := state(t, m).Nodes[3].Incarnation; got != s.inc {
			t.Errorf("%s: incarnation = %q, want %q", s.name, got, s.inc)
		}
	}
}

// A node's start count never goes down: a registration with a lower one
// comes from an older copy of its data dir.
func TestRegisterNodeStartsOnlyGoUp(t *testing.T) {
	m := NewStateMachine(nil)(ShardID, 1)
	node := func(starts uint64, run string) *Command {
		return &Command{Op: OpRegisterNode, Node: &Node{ID: 3, RaftAddr: "r", GRPCAddr: "g", MetaVoter: true, State: NodeActive, Incarnation: "aaaa", Starts: starts, Run: run}}
	}
	steps := []struct {
		name   string
		cmd    *Command
		want   uint64
		starts uint64
	}{
		{"a record without a count", node(0, ""), ResultOK, 0},
		{"the first counted start", node(1, "p1"), ResultOK, 1},
		{"the same process again", node(1, "p1"), ResultNoop, 1},
		{"a later start", node(5, "p5"), ResultOK, 5},
		{"an older copy is refused", node(4, "p4"), ResultExists, 5},
		{"an older copy started as often is refused", node(5, "q5"), ResultExists, 5},
		{"a copy from before counts is refused", node(0, ""), ResultExists, 5},
	}
	for i, s := range steps {
		if got := apply(t, m, uint64(i+1), s.cmd).Value; got != s.want {
			t.Errorf("%s: register_node = %d, want %d", s.name, got, s.want)
		}
		if got := state(t, m).Nodes[3].Starts; got != s.starts {
			t.Errorf("%s: starts = %d, want %d", s.name, got, s.starts)
		}
	}
}

func TestFirstBootstrapNamesTheCluster(t *testing.T) {
	m := bootstrapped(t) // bootstrapped without a cluster id, like old clusters
	if r := apply(t, m, 5, &Command{Op: OpBootstrapShards, Count: 8, RF: 3, ClusterID: "c1"}); r.Value != ResultOK {
		t.Fatalf("bootstrap of a cluster without id = %d, want ResultOK (names it)", r.Value)
	}
	if r := apply(t, m, 6, &Command{Op: OpBootstrapShards, Count: 8, RF: 3, ClusterID: "c2"}); r.Value != ResultNoop {
		t.Fatalf("second bootstrap = %d, want ResultNoop", r.Value)
	}
	s := state(t, m)
	if s.ClusterID != "c1" || len(s.Shards) != 8 {
		t.Fatalf("cluster id %q with %d shards, want c1 with 8", s.ClusterID, len(s.Shards))
	}
	if c := s.Clone(); c.ClusterID != "c1" {
		t.Fatalf("Clone().ClusterID = %q, want c1", c.ClusterID)
	}
}
