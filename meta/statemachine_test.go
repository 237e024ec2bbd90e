package meta

import (
	"bytes"
	"encoding/json"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

func apply(t *testing.T, m sm.IStateMachine, index uint64, c *Command) sm.Result {
	t.Helper()
	r, err := m.Update(sm.Entry{Index: index, Cmd: c.Encode()})
	if err != nil {
		t.Fatalf("Update(%s) error = %v", c.Op, err)
	}
	return r
}

func state(t *testing.T, m sm.IStateMachine) *State {
	t.Helper()
	v, err := m.Lookup(Query{})
	if err != nil {
		t.Fatalf("Lookup() error = %v", err)
	}
	return v.(*State)
}

func bootstrapped(t *testing.T) sm.IStateMachine {
	m := NewStateMachine(nil)(ShardID, 1)
	for i := uint64(1); i <= 3; i++ {
		apply(t, m, i, &Command{Op: OpRegisterNode, Node: &Node{ID: NodeID(i), RaftAddr: "r", GRPCAddr: "g", MetaVoter: true}})
	}
	apply(t, m, 4, &Command{Op: OpBootstrapShards, Count: 8, RF: 3})
	return m
}

func TestBootstrapPlacesReplicasOnDistinctNodes(t *testing.T) {
	m := bootstrapped(t)
	s := state(t, m)
	if len(s.Shards) != 8 {
		t.Fatalf("shards = %d, want 8", len(s.Shards))
	}
	seenReplica := map[ReplicaID]bool{}
	for _, id := range s.ShardIDs() {
		sh := s.Shards[id]
		nodes := map[NodeID]bool{}
		for _, r := range sh.Replicas {
			if nodes[r.Node] || seenReplica[r.ID] {
				t.Fatalf("shard %d: replica %v reuses a node or an id", id, r)
			}
			nodes[r.Node], seenReplica[r.ID] = true, true
		}
		if len(sh.Replicas) != 3 {
			t.Fatalf("shard %d has %d replicas, want 3", id, len(sh.Replicas))
		}
	}
	// A second bootstrap changes nothing.
	if r := apply(t, m, 5, &Command{Op: OpBootstrapShards, Count: 8, RF: 3}); r.Value != ResultNoop {
		t.Fatalf("second bootstrap = %d, want ResultNoop", r.Value)
	}
}

func TestCreateTopic(t *testing.T) {
	m := bootstrapped(t)
	topic := &Topic{Name: "orders", Partitions: 2}
	if r := apply(t, m, 5, &Command{Op: OpCreateTopic, Topic: topic, NowMs: 1000}); r.Value != ResultOK {
		t.Fatalf("create = %d, want ResultOK", r.Value)
	}
	if r := apply(t, m, 6, &Command{Op: OpCreateTopic, Topic: topic}); r.Value != ResultExists {
		t.Fatalf("create again = %d, want ResultExists", r.Value)
	}
	if r := apply(t, m, 7, &Command{Op: OpCreateTopic, Topic: topic, IfNotExists: true}); r.Value != ResultNoop {
		t.Fatalf("create if-not-exists = %d, want ResultNoop", r.Value)
	}
	got := state(t, m).Topics["orders"]
	if got.CreatedAtMs != 1000 || len(got.Groups) != 1 || got.Groups[0] != DefaultGroup {
		t.Fatalf("topic = %+v, want created at 1000 with group default", got)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	m := bootstrapped(t)
	var buf bytes.Buffer
	if err := m.SaveSnapshot(&buf, nil, nil); err != nil {
		t.Fatalf("SaveSnapshot() error = %v", err)
	}
	other := NewStateMachine(nil)(ShardID, 2)
	if err := other.RecoverFromSnapshot(&buf, nil, nil); err != nil {
		t.Fatalf("RecoverFromSnapshot() error = %v", err)
	}
	a, _ := json.Marshal(state(t, m))
	b, _ := json.Marshal(state(t, other))
	if !bytes.Equal(a, b) {
		t.Fatalf("recovered state differs:\n%s\n%s", a, b)
	}
}

func TestMalformedCommandIsSkipped(t *testing.T) {
	m := bootstrapped(t)
	before := state(t, m).Version
	r, err := m.Update(sm.Entry{Index: 9, Cmd: []byte("{not json")})
	if err != nil || r.Value != ResultInvalid || state(t, m).Version != before {
		t.Fatalf("Update(garbage) = %v, %v; version %d, want ResultInvalid and no change", r, err, state(t, m).Version)
	}
}

func FuzzDecodeCommand(f *testing.F) {
	f.Add((&Command{Op: OpCreateTopic, Topic: &Topic{Name: "t"}}).Encode())
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		s := NewState()
		s.Apply(c)
	})
}

func TestGroupsAndTopicChanges(t *testing.T) {
	m := bootstrapped(t)
	apply(t, m, 5, &Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders", Partitions: 1, MaxAttempts: 10}})
	steps := []struct {
		c    *Command
		want uint64
	}{
		{&Command{Op: OpCreateGroup, Name: "orders", Group: "billing"}, ResultOK},
		{&Command{Op: OpCreateGroup, Name: "orders", Group: "billing"}, ResultExists},
		{&Command{Op: OpCreateGroup, Name: "orders", Group: "billing", IfNotExists: true}, ResultNoop},
		{&Command{Op: OpCreateGroup, Name: "missing", Group: "g"}, ResultNotFound},
		{&Command{Op: OpUpdateTopic, Topic: &Topic{Name: "orders", Partitions: 1, MaxAttempts: 3, ReleaseRatePerSec: 5}}, ResultOK},
		{&Command{Op: OpDeleteGroup, Name: "orders", Group: "nope"}, ResultNotFound},
		{&Command{Op: OpDeleteGroup, Name: "orders", Group: "billing"}, ResultOK},
	}
	for i, s := range steps {
		if r := apply(t, m, uint64(6+i), s.c); r.Value != s.want {
			t.Fatalf("step %d %s = %d, want %d", i, s.c.Op, r.Value, s.want)
		}
	}
	got := state(t, m).Topics["orders"]
	if got.MaxAttempts != 3 || got.ReleaseRatePerSec != 5 || len(got.Groups) != 1 || got.Groups[0] != DefaultGroup {
		t.Fatalf("topic = %+v, want max attempts 3, rate 5, groups [default]", got)
	}
	if r := apply(t, m, 20, &Command{Op: OpDeleteTopic, Name: "orders"}); r.Value != ResultOK || state(t, m).Topics["orders"] != nil {
		t.Fatalf("delete topic = %d, topic %v", r.Value, state(t, m).Topics["orders"])
	}
}
