package host

import (
	"slices"
	"testing"

	"github.com/lni/dragonboat/v4/raftio"

	"github.com/sundialmq/sundial/meta"
)

// The replicas on disk a node may delete without starting them: only
// event-shard replicas taken off the node for good, never one a meta state
// replayed behind the disk may not show placed yet.
func TestStaleReplicas(t *testing.T) {
	// Shard 100 on nodes 1-3 (replicas 1-3), shard 101 on nodes 1, 2, 4
	// (4, 5, 6): node 3 holds none of it; replica 7 is being added to
	// shard 101 on node 3 (add-learner not recorded yet).
	st := meta.NewState()
	st.Shards[100] = &meta.Shard{ID: 100, Replicas: []meta.Replica{{ID: 1, Node: 1}, {ID: 2, Node: 2}, {ID: 3, Node: 3}}}
	st.Shards[101] = &meta.Shard{ID: 101, Replicas: []meta.Replica{{ID: 4, Node: 1}, {ID: 5, Node: 2}, {ID: 6, Node: 4}}}
	st.NextReplicaID = 8
	st.Operations = map[meta.OperationID]*meta.Operation{1: {ID: 1, Kind: meta.OpKindMoveReplica, Shard: 101, From: 4, To: 3,
		NewReplica: 7, Status: meta.OperationRunning, Steps: []meta.Step{{Kind: meta.StepAddLearner, Node: 3}}}}
	tests := []struct {
		name    string
		onDisk  raftio.NodeInfo
		running bool
		stale   bool
	}{
		{"the meta group's replica", raftio.NodeInfo{ShardID: meta.ShardID, ReplicaID: 3}, false, false},
		{"a replica placed here, not started yet", raftio.NodeInfo{ShardID: 100, ReplicaID: 3}, false, false},
		{"an earlier replica of a shard placed here (its join clears it)", raftio.NodeInfo{ShardID: 100, ReplicaID: 2}, false, false},
		{"a removed replica that still runs (dropUnplaced's)", raftio.NodeInfo{ShardID: 101, ReplicaID: 5}, true, false},
		{"a removed replica that never started", raftio.NodeInfo{ShardID: 101, ReplicaID: 5}, false, true},
		{"a replica being added", raftio.NodeInfo{ShardID: 101, ReplicaID: 7}, false, false},
		{"a replica id not handed out in this state", raftio.NodeInfo{ShardID: 101, ReplicaID: 9}, false, false},
		{"a replica of a shard meta does not know", raftio.NodeInfo{ShardID: 102, ReplicaID: 2}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			running := map[uint64]bool{tt.onDisk.ShardID: tt.running}
			got := staleReplicas(st, 3, []raftio.NodeInfo{tt.onDisk}, running)
			if stale := slices.Contains(got, tt.onDisk); stale != tt.stale {
				t.Fatalf("staleReplicas(%+v, running %v) = %v, want stale %v", tt.onDisk, tt.running, got, tt.stale)
			}
		})
	}
}
