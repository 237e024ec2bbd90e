package broker

import (
	"maps"
	"testing"

	"github.com/sundialmq/sundial/meta"
)

func TestMergeLeaders(t *testing.T) {
	st := &meta.State{
		Nodes:  map[meta.NodeID]*meta.Node{1: {ID: 1}, 2: {ID: 2}, 3: {ID: 3}},
		Shards: map[meta.EventShardID]*meta.Shard{100: {ID: 100}, 101: {ID: 101}, 102: {ID: 102}},
	}
	tests := []struct {
		name    string
		reports map[uint64]map[uint64]uint64
		want    map[uint64]uint64
	}{
		{"no reports", nil, map[uint64]uint64{}},
		{"one peer", map[uint64]map[uint64]uint64{2: {100: 3, 101: 0}}, map[uint64]uint64{100: 3}},
		{
			"the leader's own word wins over a stale view",
			map[uint64]map[uint64]uint64{1: {100: 2}, 3: {100: 3}},
			map[uint64]uint64{100: 3},
		},
		{
			"lowest node id among views when no peer leads",
			map[uint64]map[uint64]uint64{2: {102: 1}, 3: {102: 4}},
			map[uint64]uint64{102: 1},
		},
		{"a shard not in the meta state is ignored", map[uint64]map[uint64]uint64{2: {999: 2}}, map[uint64]uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeLeaders(st, tc.reports); !maps.Equal(got, tc.want) {
				t.Errorf("mergeLeaders(%v) = %v, want %v", tc.reports, got, tc.want)
			}
		})
	}
}
