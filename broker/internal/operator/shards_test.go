package operator

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/meta"
)

// shardsHost is a meta state Shards reads and proposes to, with the shard
// leaders this node knows.
type shardsHost struct {
	fakeHost
	leaders map[uint64]uint64
}

func (h *shardsHost) ShardLeader(shard uint64) uint64 { return h.leaders[shard] }

// registered is a meta state with nodes ids registered and nothing else.
func registered(ids ...meta.NodeID) *meta.State {
	s := meta.NewState()
	for _, id := range ids {
		s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: id, GRPCAddr: "g", State: meta.NodeActive}})
	}
	return s
}

// bootstrapped is registered(1, 2, 3) with two first shards created,
// starting.
func bootstrapped() *meta.State {
	s := registered(1, 2, 3)
	s.Apply(&meta.Command{Op: meta.OpAddShards, Bootstrap: true, Count: 2, RF: 3, ClusterID: "c"})
	return s
}

// The shard decisions, one round each on a given meta state: what the
// meta leader proposes, and that nothing else does.
func TestShardsStep(t *testing.T) {
	members := []uint64{1, 2, 3}
	tests := []struct {
		name    string
		st      *meta.State
		leader  uint64            // meta leader; this node is 1
		members []uint64          // ShardsConfig.InitialMembers
		leaders map[uint64]uint64 // shard leaders known here
		// Want after the round: shard count, ring shards, a cluster id,
		// and the change counted.
		shards, ring int
		named        bool
		change       string
	}{
		{name: "an initial member not registered yet", st: registered(1, 2), leader: 1, members: members},
		{name: "every initial member registered", st: registered(1, 2, 3), leader: 1, members: members,
			shards: 2, named: true, change: changeBootstrap},
		{name: "not the meta leader", st: registered(1, 2, 3), leader: 2, members: members},
		{name: "a joined broker knows no initial members", st: registered(1, 2, 3), leader: 1},
		{name: "starting shards, one without a known leader", st: bootstrapped(), leader: 1, members: members,
			leaders: map[uint64]uint64{100: 2}, shards: 2, named: true},
		{name: "starting shards all led", st: bootstrapped(), leader: 1, members: members,
			leaders: map[uint64]uint64{100: 2, 101: 3}, shards: 2, ring: 2, named: true, change: changeServe},
		{name: "starting shards all led, seeding groups", st: seeding(bootstrapped()), leader: 1, members: members,
			leaders: map[uint64]uint64{100: 2, 101: 3}, shards: 2, named: true},
		{name: "starting shards all led, not the meta leader", st: bootstrapped(), leader: 3, members: members,
			leaders: map[uint64]uint64{100: 2, 101: 3}, shards: 2, named: true},
		{name: "bootstrapped before cluster ids", st: oldBootstrap(), leader: 1, members: members,
			shards: 2, ring: 2, named: true, change: changeNameCluster},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &shardsHost{fakeHost: fakeHost{st: tt.st, leader: tt.leader}, leaders: tt.leaders}
			reg := prometheus.NewRegistry()
			s := NewShards(h, 1, ShardsConfig{InitialMembers: tt.members, Shards: 2}, zaptest.NewLogger(t), reg)
			s.Step(t.Context())
			st, _ := h.ReadMeta(t.Context())
			if len(st.Shards) != tt.shards || len(st.RingShards()) != tt.ring || (st.ClusterID != "") != tt.named {
				t.Fatalf("Step() left shards %v, ring %v, cluster id %q; want %d shards, %d on the ring, named %v",
					st.ShardIDs(), st.RingShards(), st.ClusterID, tt.shards, tt.ring, tt.named)
			}
			for _, c := range []string{changeBootstrap, changeServe, changeNameCluster} {
				want := 0.0
				if c == tt.change {
					want = 1
				}
				if got := shardChanges(t, reg, c); got != want {
					t.Errorf("sundial_operator_shard_changes_total{change=%q} = %v, want %v", c, got, want)
				}
			}
		})
	}
}

// A round repeated, as a new meta leader runs it on the state its
// predecessor left (or after a proposal that timed out once committed),
// changes nothing twice: the first shards are created once, keep their
// placement and cluster id, and are served once.
func TestShardsStepRepeatedIsANoop(t *testing.T) {
	h := &shardsHost{fakeHost: fakeHost{st: registered(1, 2, 3), leader: 1}}
	cfg := ShardsConfig{InitialMembers: []uint64{1, 2, 3}, Shards: 2}
	reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	s1 := NewShards(h, 1, cfg, zaptest.NewLogger(t), reg1)
	s1.Step(t.Context())
	s1.Step(t.Context()) // no leader known yet: nothing
	first, _ := h.ReadMeta(t.Context())
	// The new meta leader, node 2, knows the leaders once they are elected.
	h.leader, h.leaders = 2, map[uint64]uint64{100: 1, 101: 3}
	s2 := NewShards(h, 2, cfg, zaptest.NewLogger(t), reg2)
	s2.Step(t.Context())
	s2.Step(t.Context())
	st, _ := h.ReadMeta(t.Context())
	if st.ClusterID != first.ClusterID || !slices.Equal(st.ShardIDs(), first.ShardIDs()) || len(st.RingShards()) != 2 {
		t.Fatalf("after rounds on two meta leaders: shards %v, ring %v, cluster id %q; want the first round's %v (cluster %q), both on the ring",
			st.ShardIDs(), st.RingShards(), st.ClusterID, first.ShardIDs(), first.ClusterID)
	}
	for _, id := range st.ShardIDs() {
		if !slices.Equal(st.Shards[id].Replicas, first.Shards[id].Replicas) {
			t.Fatalf("shard %d replicas %v after the new leader's rounds, want %v as created", id, st.Shards[id].Replicas, first.Shards[id].Replicas)
		}
	}
	// A bootstrap proposed again is answered no-op by the meta state.
	if code, _, _ := h.ProposeMeta(t.Context(), &meta.Command{Op: meta.OpAddShards, Bootstrap: true, Count: 2, RF: 3, ClusterID: "other"}); code != meta.ResultNoop {
		t.Fatalf("add_shards bootstrap on a bootstrapped cluster = %d, want ResultNoop (%d)", code, meta.ResultNoop)
	}
	for _, c := range []struct {
		reg    prometheus.Gatherer
		node   int
		change string
		want   float64
	}{{reg1, 1, changeBootstrap, 1}, {reg1, 1, changeServe, 0}, {reg2, 2, changeBootstrap, 0}, {reg2, 2, changeServe, 1}} {
		if got := shardChanges(t, c.reg, c.change); got != c.want {
			t.Errorf("node %d: sundial_operator_shard_changes_total{change=%q} = %v, want %v", c.node, c.change, got, c.want)
		}
	}
}

// seeding adds an unfinished seed-groups operation to s.
func seeding(s *meta.State) *meta.State {
	if s.Operations == nil {
		s.Operations = map[meta.OperationID]*meta.Operation{}
	}
	s.Operations[1] = &meta.Operation{ID: 1, Kind: meta.OpKindSeedGroups, Topic: "orders", Status: meta.OperationPending}
	return s
}

// oldBootstrap is registered(1, 2, 3) bootstrapped by bootstrap_shards
// with no cluster id, as brokers did before cluster ids.
func oldBootstrap() *meta.State {
	s := registered(1, 2, 3)
	s.Apply(&meta.Command{Op: meta.OpBootstrapShards, Count: 2, RF: 3})
	return s
}

func shardChanges(t *testing.T, g prometheus.Gatherer, change string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sundial_operator_shard_changes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelIs(m, "change", change) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no sundial_operator_shard_changes_total{change=%q}", change)
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
