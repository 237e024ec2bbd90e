package meta

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/sundialmq/sundial/proto/ring"
)

// withTopics is the bootstrapped 3-node, 8-shard state with topics a (16
// partitions) and b (1 partition).
func withTopics(t *testing.T) *State {
	t.Helper()
	s := state(t, bootstrapped(t))
	for _, tp := range []*Topic{{Name: "a", Partitions: 16}, {Name: "b", Partitions: 1}} {
		if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: tp}); code != ResultOK {
			t.Fatalf("create topic %s = %d, want ResultOK", tp.Name, code)
		}
	}
	return s
}

func addShards(t *testing.T, s *State, n int) []EventShardID {
	t.Helper()
	code, data := s.Apply(&Command{Op: OpAddShards, Count: n})
	if code != ResultOK {
		t.Fatalf("add_shards %d = %d, want ResultOK", n, code)
	}
	var ids []EventShardID
	if err := json.Unmarshal(data, &ids); err != nil {
		t.Fatalf("add_shards answer %q: %v", data, err)
	}
	return ids
}

// Added shards start off the ring, with the cluster's replication factor
// on distinct nodes, new replica ids, and the least-loaded nodes first.
func TestAddShardsStartsOffTheRing(t *testing.T) {
	s := withTopics(t)
	apply := func(c *Command) uint64 { code, _ := s.Apply(c); return code }
	if code := apply(&Command{Op: OpRegisterNode, Node: &Node{ID: 4, RaftAddr: "r4", GRPCAddr: "g4"}}); code != ResultOK {
		t.Fatalf("register node 4 = %d", code)
	}
	ringBefore := s.RingShards()
	v, nextReplica := s.Version, s.NextReplicaID
	ids := addShards(t, s, 2)
	if want := []EventShardID{108, 109}; !slices.Equal(ids, want) {
		t.Fatalf("add_shards ids = %v, want %v", ids, want)
	}
	if s.Version != v+1 {
		t.Fatalf("Version = %d, want %d", s.Version, v+1)
	}
	if got := s.RingShards(); !slices.Equal(got, ringBefore) {
		t.Fatalf("RingShards() after add = %v, want %v (starting shards stay off)", got, ringBefore)
	}
	if got := s.StartingShards(); !slices.Equal(got, ids) {
		t.Fatalf("StartingShards() = %v, want %v", got, ids)
	}
	onNode4 := 0
	for _, id := range ids {
		sh := s.Shards[id]
		seen := map[NodeID]bool{}
		for _, r := range sh.Replicas {
			if seen[r.Node] || r.ID < nextReplica || r.Join {
				t.Fatalf("shard %d replicas %+v: want distinct nodes, fresh ids, initial members", id, sh.Replicas)
			}
			seen[r.Node] = true
			if r.Node == 4 {
				onNode4++
			}
		}
		if len(sh.Replicas) != 3 {
			t.Fatalf("shard %d has %d replicas, want the cluster's 3", id, len(sh.Replicas))
		}
	}
	if onNode4 != 2 {
		t.Fatalf("node 4 (no replicas) got %d of the new replicas, want 2 (least loaded first)", onNode4)
	}
	// One growth at a time.
	if code := apply(&Command{Op: OpAddShards, Count: 1}); code != ResultExists {
		t.Fatalf("add_shards while shards start = %d, want ResultExists", code)
	}
}

func TestAddShardsRefusesBadCounts(t *testing.T) {
	for _, n := range []int{0, -1, MaxAddShards + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := withTopics(t)
			if code, _ := s.Apply(&Command{Op: OpAddShards, Count: n}); code != ResultInvalid {
				t.Fatalf("add_shards %d = %d, want ResultInvalid", n, code)
			}
			if _, err := DecodeCommand((&Command{Op: OpAddShards, Count: n}).Encode()); err == nil {
				t.Fatalf("DecodeCommand(add_shards %d) = nil error, want malformed", n)
			}
		})
	}
	if code, _ := NewState().Apply(&Command{Op: OpAddShards, Count: 1}); code != ResultInvalid {
		t.Fatalf("add_shards before bootstrap = %d, want ResultInvalid", code)
	}
}

// Serving the new shards opens a hand-over for exactly the partitions whose
// ring owner changed, from the old owner to the new one, and nothing else.
func TestServeShardsOpensHandoversOfMovedPartitions(t *testing.T) {
	s := withTopics(t)
	before := ring.New(s.RingShards())
	ids := addShards(t, s, 8)
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids[:7], NowMs: 500}); code != ResultInvalid {
		t.Fatalf("serve_shards leaving one out = %d, want ResultInvalid", code)
	}
	for _, op := range unfinishedSeeds(s) {
		runAll(t, s, op.ID)
	}
	v := s.Version
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids, NowMs: 500}); code != ResultOK {
		t.Fatalf("serve_shards = %d, want ResultOK", code)
	}
	if s.Version != v+1 || len(s.StartingShards()) != 0 || len(s.RingShards()) != 16 {
		t.Fatalf("after serve: version %d (want %d), starting %v, ring %v", s.Version, v+1, s.StartingShards(), s.RingShards())
	}
	after := ring.New(s.RingShards())
	moved := 0
	for _, name := range []string{"a", "b"} {
		for p := range s.Topics[name].Partitions {
			from, to := before.Locate(name, p), after.Locate(name, p)
			h, open := s.HandoverOf(name, p)
			if from == to {
				if open {
					t.Fatalf("HandoverOf(%s, %d) = %+v, want none (owner %d unchanged)", name, p, h, from)
				}
				continue
			}
			moved++
			want := Handover{Topic: name, Partition: p, From: EventShardID(from), To: EventShardID(to), OpenedAtMs: 500}
			if !open || h != want {
				t.Fatalf("HandoverOf(%s, %d) = %+v, %v, want %+v", name, p, h, open, want)
			}
			if !slices.Contains(ids, h.To) || slices.Contains(ids, h.From) {
				t.Fatalf("hand-over %+v: want from an old shard to a new one", h)
			}
		}
	}
	if moved == 0 || moved != len(s.Handovers) {
		t.Fatalf("moved partitions = %d, hand-overs = %d, want equal and non-zero", moved, len(s.Handovers))
	}
	if code, _ := s.Apply(&Command{Op: OpServeShards, Shards: ids}); code != ResultNoop {
		t.Fatalf("serve_shards again = %d, want ResultNoop", code)
	}
	if code, _ := s.Apply(&Command{Op: OpAddShards, Count: 1}); code != ResultExists {
		t.Fatalf("add_shards while hand-overs are open = %d, want ResultExists", code)
	}

	// Keys stay on the old shard until the hand-over is sealed; only a
	// sealed one closes; closing ends one hand-over; the snapshot form
	// keeps the rest.
	h := s.Handovers[0]
	if on, ok := s.KeyedOn(h.Topic, h.Partition); !ok || on != h.From {
		t.Fatalf("KeyedOn(%s, %d) = %d, %v, want %d, true", h.Topic, h.Partition, on, ok, h.From)
	}
	if code, _ := s.Apply(&Command{Op: OpCloseHandover, Name: h.Topic, Partition: h.Partition}); code != ResultInvalid {
		t.Fatalf("close_handover before seal = %d, want ResultInvalid", code)
	}
	v = s.Version
	if code, _ := s.Apply(&Command{Op: OpSealHandover, Name: h.Topic, Partition: h.Partition, NowMs: 900}); code != ResultOK || s.Version != v+1 {
		t.Fatalf("seal_handover = %d (version %d), want ResultOK, version %d", code, s.Version, v+1)
	}
	if on, ok := s.KeyedOn(h.Topic, h.Partition); ok {
		t.Fatalf("KeyedOn(%s, %d) after seal = %d, true, want the ring's owner", h.Topic, h.Partition, on)
	}
	if code, _ := s.Apply(&Command{Op: OpSealHandover, Name: h.Topic, Partition: h.Partition, NowMs: 900}); code != ResultNoop {
		t.Fatalf("seal_handover again = %d, want ResultNoop", code)
	}
	v = s.Version
	if code, _ := s.Apply(&Command{Op: OpCloseHandover, Name: h.Topic, Partition: h.Partition}); code != ResultOK || s.Version != v+1 {
		t.Fatalf("close_handover = %d (version %d), want ResultOK, version %d", code, s.Version, v+1)
	}
	if _, open := s.HandoverOf(h.Topic, h.Partition); open {
		t.Fatalf("hand-over %+v still open after close", h)
	}
	if code, _ := s.Apply(&Command{Op: OpCloseHandover, Name: h.Topic, Partition: h.Partition}); code != ResultNotFound {
		t.Fatalf("close_handover again = %d, want ResultNotFound", code)
	}
	c := s.Clone()
	if !slices.Equal(c.Handovers, s.Handovers) || c.Shards[ids[0]].State != s.Shards[ids[0]].State {
		t.Fatalf("Clone lost hand-overs or shard states")
	}
	b, _ := json.Marshal(s)
	var back State
	if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.Handovers, s.Handovers) {
		t.Fatalf("JSON round trip: %v, hand-overs %v, want %v", err, back.Handovers, s.Handovers)
	}

	// Deleting a topic drops its hand-overs; closing the last one lets the
	// cluster grow again.
	s.Apply(&Command{Op: OpDeleteTopic, Name: "a"})
	s.Apply(&Command{Op: OpDeleteTopic, Name: "b"})
	if len(s.Handovers) != 0 {
		t.Fatalf("hand-overs after deleting every topic = %v, want none", s.Handovers)
	}
	addShards(t, s, 1)
}

func TestDecodeShardCommands(t *testing.T) {
	tests := []struct {
		name string
		c    Command
		ok   bool
	}{
		{"serve_shards", Command{Op: OpServeShards, Shards: []EventShardID{108}}, true},
		{"serve_shards without shards", Command{Op: OpServeShards}, false},
		{"seal_handover", Command{Op: OpSealHandover, Name: "a", Partition: 3}, true},
		{"seal_handover without topic", Command{Op: OpSealHandover, Partition: 3}, false},
		{"close_handover", Command{Op: OpCloseHandover, Name: "a"}, true},
		{"close_handover without topic", Command{Op: OpCloseHandover}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCommand(tc.c.Encode())
			if (err == nil) != tc.ok {
				t.Fatalf("DecodeCommand(%+v) error = %v, want ok %v", tc.c, err, tc.ok)
			}
		})
	}
}
