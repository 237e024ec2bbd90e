package meta

import (
	"encoding/json"
	"testing"
)

// join_node registers a broker of a bootstrapped cluster as a non-voting
// active node: it assigns the next free id when asked with 0, keeps a free
// id it is given, answers a retried join again, and refuses a taken id, a
// cluster not bootstrapped yet and another cluster's data dir.
func TestJoinNode(t *testing.T) {
	joiner := func(id NodeID, inc, cluster string) *Command {
		return &Command{Op: OpJoinNode, ClusterID: cluster, Node: &Node{ID: id, RaftAddr: "r4", GRPCAddr: "g4", Incarnation: inc, Labels: map[string]string{"zone": "b"}}}
	}
	cases := []struct {
		name   string
		first  *Command // applied before c, when set
		c      *Command
		want   uint64
		wantID NodeID
	}{
		{name: "id 0 gets the next free id", c: joiner(0, "inc-a", ""), want: ResultOK, wantID: 4},
		{name: "a free id is kept", c: joiner(9, "inc-a", "c1"), want: ResultOK, wantID: 9},
		{name: "a taken id is refused", c: joiner(2, "inc-a", ""), want: ResultExists},
		{name: "another cluster is refused", c: joiner(0, "inc-a", "other"), want: ResultInvalid},
		{name: "a retried join answers the same node", first: joiner(0, "inc-a", ""), c: joiner(0, "inc-a", "c1"), want: ResultNoop, wantID: 4},
		{name: "the same id from another data dir is refused", first: joiner(0, "inc-a", ""), c: joiner(4, "inc-b", ""), want: ResultExists},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := bootstrapped(t)
			apply(t, m, 5, &Command{Op: OpBootstrapShards, Count: 1, RF: 1, ClusterID: "c1"})
			if tc.first != nil {
				apply(t, m, 6, tc.first)
			}
			before := state(t, m).Version
			r := apply(t, m, 7, tc.c)
			if r.Value != tc.want {
				t.Fatalf("join_node(%+v) = %d, want %d", tc.c.Node, r.Value, tc.want)
			}
			if tc.wantID == 0 {
				if v := state(t, m).Version; v != before {
					t.Fatalf("refused join_node changed the version %d -> %d", before, v)
				}
				return
			}
			var n Node
			if err := json.Unmarshal(r.Data, &n); err != nil {
				t.Fatalf("join_node answered %q: %v", r.Data, err)
			}
			got := state(t, m).Nodes[tc.wantID]
			if n.ID != tc.wantID || got == nil || !got.Equal(&n) || got.Labels["zone"] != "b" || got.MetaVoter || got.State != NodeActive {
				t.Fatalf("join_node stored %+v, answered %+v; want node %d active in zone b, not a meta voter", got, n, tc.wantID)
			}
		})
	}
	t.Run("a cluster not bootstrapped refuses", func(t *testing.T) {
		m := NewStateMachine(nil)(ShardID, 1)
		if r := apply(t, m, 1, joiner(0, "inc-a", "")); r.Value != ResultInvalid {
			t.Fatalf("join_node before bootstrap = %d, want ResultInvalid", r.Value)
		}
	})
}

// A node's labels are part of its record: registering them again changes
// nothing, registering others (a restart with new --labels) replaces them,
// and a clone of the state does not share the map.
func TestRegisterNodeLabels(t *testing.T) {
	m := bootstrapped(t)
	reg := func(labels map[string]string) *Command {
		return &Command{Op: OpRegisterNode, Node: &Node{ID: 7, RaftAddr: "r7", GRPCAddr: "g7", State: NodeActive, Incarnation: "inc-7", Labels: labels}}
	}
	steps := []struct {
		labels map[string]string
		want   uint64
	}{
		{map[string]string{"zone": "a"}, ResultOK},
		{map[string]string{"zone": "a"}, ResultNoop},
		{map[string]string{"zone": "c", "rack": "r2"}, ResultOK},
	}
	for i, st := range steps {
		if r := apply(t, m, uint64(10+i), reg(st.labels)); r.Value != st.want {
			t.Fatalf("register_node #%d with labels %v = %d, want %d", i, st.labels, r.Value, st.want)
		}
	}
	s := state(t, m)
	if got := s.Nodes[7].Labels; got["zone"] != "c" || got["rack"] != "r2" || len(got) != 2 {
		t.Fatalf("node 7 labels = %v, want zone=c rack=r2", got)
	}
	c := s.Clone()
	c.Nodes[7].Labels["zone"] = "x"
	if s.Nodes[7].Labels["zone"] != "c" {
		t.Fatalf("changing a clone's labels changed the state's: zone=%s", s.Nodes[7].Labels["zone"])
	}
}
