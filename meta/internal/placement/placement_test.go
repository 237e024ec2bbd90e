package placement

import (
	"fmt"
	"testing"
)

func TestSpread(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
		count int
		rf    int
		want  string
	}{
		{"three nodes rf3", []Node{{ID: 1, Replicas: 0}, {ID: 2, Replicas: 0}, {ID: 3, Replicas: 0}}, 2, 3, "[[1 2 3] [1 2 3]]"},
		{"single node rf1", []Node{{ID: 1, Replicas: 0}}, 3, 1, "[[1] [1] [1]]"},
		{"five nodes rf3 balances", []Node{{ID: 1, Replicas: 0}, {ID: 2, Replicas: 0}, {ID: 3, Replicas: 0}, {ID: 4, Replicas: 0}, {ID: 5, Replicas: 0}}, 5, 3, "[[1 2 3] [1 4 5] [2 3 4] [1 2 5] [3 4 5]]"},
		{"prefers least loaded", []Node{{ID: 1, Replicas: 4}, {ID: 2, Replicas: 0}, {ID: 3, Replicas: 0}, {ID: 4, Replicas: 1}}, 1, 3, "[[2 3 4]]"},
		{"too few nodes", []Node{{ID: 1, Replicas: 0}, {ID: 2, Replicas: 0}}, 1, 3, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fmt.Sprint(Spread(tt.nodes, tt.count, tt.rf))
			if got != tt.want {
				t.Fatalf("Spread(%v, %d, %d) = %s, want %s", tt.nodes, tt.count, tt.rf, got, tt.want)
			}
		})
	}
}

func TestSpreadReplicasOnDistinctNodes(t *testing.T) {
	nodes := []Node{{ID: 1, Replicas: 0}, {ID: 2, Replicas: 0}, {ID: 3, Replicas: 0}, {ID: 4, Replicas: 0}, {ID: 5, Replicas: 0}, {ID: 6, Replicas: 0}, {ID: 7, Replicas: 0}}
	for _, shard := range Spread(nodes, 64, 3) {
		seen := map[uint64]bool{}
		for _, n := range shard {
			if seen[n] {
				t.Fatalf("shard placed twice on node %d: %v", n, shard)
			}
			seen[n] = true
		}
	}
}

// Labelled nodes: each shard spans every zone the nodes offer before a
// zone holds two of its replicas, least loaded first within a zone.
func TestSpreadAcrossZones(t *testing.T) {
	nodes := []Node{{ID: 1, Zone: "a"}, {ID: 2, Zone: "a"}, {ID: 3, Zone: "a"}, {ID: 4, Zone: "b"}, {ID: 5, Zone: "b"}, {ID: 6, Zone: "c"}}
	got := fmt.Sprint(Spread(nodes, 4, 3))
	if want := "[[1 4 6] [2 5 6] [3 4 6] [1 5 6]]"; got != want {
		t.Fatalf("Spread(3 zones, 4, 3) = %s, want %s", got, want)
	}
	two := []Node{{ID: 1, Zone: "a"}, {ID: 2, Zone: "a"}, {ID: 3, Zone: "b"}}
	if got, want := fmt.Sprint(Spread(two, 2, 2)), "[[1 3] [2 3]]"; got != want {
		t.Fatalf("Spread(2 zones, 2, 2) = %s, want %s", got, want)
	}
}

func TestPick(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
		zones []string
		want  int
	}{
		{"none", nil, nil, -1},
		{"new zone beats load", []Node{{ID: 1, Replicas: 0, Zone: "a"}, {ID: 2, Replicas: 9, Zone: "b"}}, []string{"a"}, 1},
		{"fewest replicas", []Node{{ID: 1, Replicas: 2}, {ID: 2, Replicas: 1}}, nil, 1},
		{"fewest bytes", []Node{{ID: 1, DiskBytes: 9}, {ID: 2, DiskBytes: 1}}, nil, 1},
		{"lowest id", []Node{{ID: 2}, {ID: 1}}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Pick(tt.nodes, tt.zones); got != tt.want {
				t.Fatalf("Pick(%v, %v) = %d, want %d", tt.nodes, tt.zones, got, tt.want)
			}
		})
	}
}
