package meta

import (
	"encoding/json"
	"slices"
	"testing"
)

// registered is a state with nodes 1..n registered, as the initial members
// leave it before the bootstrap; zones, when given, label node i with
// zones[i-1].
func registered(t *testing.T, n int, zones ...string) *State {
	t.Helper()
	s := NewState()
	for i := 1; i <= n; i++ {
		node := &Node{ID: NodeID(i), RaftAddr: "r", GRPCAddr: "g", MetaVoter: true}
		if len(zones) > 0 {
			node.Labels = map[string]string{ZoneLabel: zones[i-1]}
		}
		if code, _ := s.Apply(&Command{Op: OpRegisterNode, Node: node}); code != ResultOK {
			t.Fatalf("register node %d = %d, want ResultOK", i, code)
		}
	}
	return s
}

func bootstrapCommand(count, rf int, clusterID string) *Command {
	return &Command{Op: OpAddShards, Bootstrap: true, Count: count, RF: rf, ClusterID: clusterID, ZoneLabel: ZoneLabel}
}

// The first shards go the way of every added shard: add_shards creates them
// starting (off the ring, nothing routed to them), serve_shards puts them
// on the ring once they have leaders. A repeated bootstrap changes nothing,
// before or after the serve step.
func TestBootstrapStartsThenServes(t *testing.T) {
	s := registered(t, 3)
	v := s.Version
	code, data := s.Apply(bootstrapCommand(8, 3, "c1"))
	if code != ResultOK {
		t.Fatalf("bootstrap = %d, want ResultOK", code)
	}
	var ids []EventShardID
	if err := json.Unmarshal(data, &ids); err != nil || len(ids) != 8 {
		t.Fatalf("bootstrap answer %q (%v), want 8 shard ids", data, err)
	}
	if s.ClusterID != "c1" || s.Version != v+1 {
		t.Fatalf("after bootstrap: cluster id %q, version %d, want c1, %d", s.ClusterID, s.Version, v+1)
	}
	if got := s.RingShards(); len(got) != 0 {
		t.Fatalf("RingShards() after bootstrap = %v, want none (the first shards start off the ring)", got)
	}
	if got := s.StartingShards(); !slices.Equal(got, ids) {
		t.Fatalf("StartingShards() = %v, want %v", got, ids)
	}
	for _, id := range ids {
		sh := s.Shards[id]
		nodes := map[NodeID]bool{}
		for _, r := range sh.Replicas {
			if nodes[r.Node] || r.Join {
				t.Fatalf("shard %d replicas %+v: want distinct nodes, initial members", id, sh.Replicas)
			}
			nodes[r.Node] = true
		}
		if len(nodes) != 3 {
			t.Fatalf("shard %d replicas %+v, want 3", id, sh.Replicas)
		}
	}
	before := s.Clone()
	if code, _ := s.Apply(bootstrapCommand(8, 3, "c2")); code != ResultNoop {
		t.Fatalf("bootstrap again while starting = %d, want ResultNoop", code)
	}
	if code, _ := s.Apply(&Command{Op: OpAddShards, Count: 1, ZoneLabel: ZoneLabel}); code != ResultExists {
		t.Fatalf("shards add while the first shards start = %d, want ResultExists", code)
	}
	if a, b := mustJSON(t, s), mustJSON(t, before); a != b {
		t.Fatalf("a refused bootstrap or growth changed the state")
	}
	v = s.Version
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 1}); code != ResultOK {
		t.Fatalf("serve_shards = %d, want ResultOK", code)
	}
	if got := s.RingShards(); len(got) != 8 || len(s.StartingShards()) != 0 || len(s.Handovers) != 0 || s.Version != v+1 {
		t.Fatalf("after serve: ring %v, starting %v, hand-overs %v, version %d (want 8 serving, none starting or handing over, version %d)",
			got, s.StartingShards(), s.Handovers, s.Version, v+1)
	}
	v = s.Version
	if code, _ := s.Apply(bootstrapCommand(8, 3, "c2")); code != ResultNoop || s.Version != v || s.ClusterID != "c1" || len(s.Shards) != 8 {
		t.Fatalf("bootstrap of a bootstrapped cluster = %d (version %d→%d, cluster %q, %d shards), want ResultNoop and no change",
			code, v, s.Version, s.ClusterID, len(s.Shards))
	}
}

func TestBootstrapRefusals(t *testing.T) {
	tests := []struct {
		name string
		s    func(t *testing.T) *State
		c    *Command
		want uint64
	}{
		{"no nodes", func(*testing.T) *State { return NewState() }, bootstrapCommand(8, 3, "c1"), ResultInvalid},
		{"no rf", func(t *testing.T) *State { return registered(t, 3) }, bootstrapCommand(8, 0, "c1"), ResultInvalid},
		{"no cluster id", func(t *testing.T) *State { return registered(t, 3) }, bootstrapCommand(8, 3, ""), ResultInvalid},
		{"no count", func(t *testing.T) *State { return registered(t, 3) }, bootstrapCommand(0, 3, "c1"), ResultInvalid},
		{"too many", func(t *testing.T) *State { return registered(t, 3) }, bootstrapCommand(MaxBootstrapShards+1, 3, "c1"), ResultInvalid},
		{"growth before the bootstrap", func(t *testing.T) *State { return registered(t, 3) }, &Command{Op: OpAddShards, Count: 8}, ResultInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s(t)
			if code, _ := s.Apply(tt.c); code != tt.want || len(s.Shards) != 0 || s.ClusterID != "" {
				t.Fatalf("Apply(%+v) = %d (%d shards, cluster %q), want %d and no change", tt.c, code, len(s.Shards), s.ClusterID, tt.want)
			}
		})
	}
	if _, err := DecodeCommand(bootstrapCommand(8, 0, "c1").Encode()); err == nil {
		t.Fatalf("DecodeCommand(bootstrap without rf) = nil error, want malformed")
	}
	if _, err := DecodeCommand(bootstrapCommand(MaxBootstrapShards, 3, "c1").Encode()); err != nil {
		t.Fatalf("DecodeCommand(bootstrap of %d shards) = %v, want nil", MaxBootstrapShards, err)
	}
}

// A single broker bootstraps RF 1; more replicas than nodes are capped at
// one per node, as the old bootstrap did.
func TestBootstrapRFAtMostTheNodes(t *testing.T) {
	s := registered(t, 1)
	if code, _ := s.Apply(bootstrapCommand(4, 3, "c1")); code != ResultOK {
		t.Fatalf("bootstrap on one node = %d, want ResultOK", code)
	}
	for _, id := range s.ShardIDs() {
		if r := s.Shards[id].Replicas; len(r) != 1 || r[0].Node != 1 {
			t.Fatalf("shard %d replicas %+v, want one on node 1", id, r)
		}
	}
}

// Labelled nodes: every first shard spans the three zones.
func TestBootstrapSpreadsAcrossZones(t *testing.T) {
	s := registered(t, 6, "a", "a", "a", "a", "b", "c")
	if code, _ := s.Apply(bootstrapCommand(8, 3, "c1")); code != ResultOK {
		t.Fatalf("bootstrap = %d, want ResultOK", code)
	}
	for _, id := range s.ShardIDs() {
		zones := map[string]bool{}
		for _, r := range s.Shards[id].Replicas {
			zones[s.Nodes[r.Node].Labels[ZoneLabel]] = true
		}
		if len(zones) != 3 {
			t.Fatalf("shard %d replicas %+v span zones %v, want a, b and c", id, s.Shards[id].Replicas, zones)
		}
	}
}

// A cluster bootstrapped by the old command (bootstrap_shards, proposed by
// every initial member before add_shards made the first shards): its log
// applies as it did then, shards serving at once without a zone spread, so
// a replica replaying it agrees with one restored from a snapshot, and the
// cluster keeps routing with no migration.
func TestOldBootstrapStillServes(t *testing.T) {
	s := registered(t, 3, "a", "a", "b")
	if code, _ := s.Apply(&Command{Op: OpBootstrapShards, Count: 8, RF: 3, ClusterID: "c1"}); code != ResultOK {
		t.Fatalf("bootstrap_shards = %d, want ResultOK", code)
	}
	if got := s.RingShards(); len(got) != 8 || len(s.StartingShards()) != 0 {
		t.Fatalf("after bootstrap_shards: ring %v, starting %v, want 8 serving", got, s.StartingShards())
	}
	for _, id := range s.ShardIDs() {
		if sh := s.Shards[id]; sh.State != "" {
			t.Fatalf("shard %d state %q, want none (as the old bootstrap stored it)", id, sh.State)
		}
	}
	if code, _ := s.Apply(bootstrapCommand(8, 3, "c2")); code != ResultNoop {
		t.Fatalf("bootstrap of an old-bootstrapped cluster = %d, want ResultNoop", code)
	}
	if code, _ := s.Apply(&Command{Op: OpAddShards, Count: 2, ZoneLabel: ZoneLabel}); code != ResultOK {
		t.Fatalf("shards add on an old-bootstrapped cluster = %d, want ResultOK", code)
	}
}

func mustJSON(t *testing.T, s *State) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal state: %v", err)
	}
	return string(b)
}
