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
		{"three nodes rf3", []Node{{1, 0}, {2, 0}, {3, 0}}, 2, 3, "[[1 2 3] [1 2 3]]"},
		{"single node rf1", []Node{{1, 0}}, 3, 1, "[[1] [1] [1]]"},
		{"five nodes rf3 balances", []Node{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}}, 5, 3, "[[1 2 3] [1 4 5] [2 3 4] [1 2 5] [3 4 5]]"},
		{"prefers least loaded", []Node{{1, 4}, {2, 0}, {3, 0}, {4, 1}}, 1, 3, "[[2 3 4]]"},
		{"too few nodes", []Node{{1, 0}, {2, 0}}, 1, 3, "[]"},
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
	nodes := []Node{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}, {6, 0}, {7, 0}}
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
