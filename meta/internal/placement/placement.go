// Package placement decides where event-shard replicas live. It is pure: it
// takes the nodes and the current replica counts and returns a plan; the
// meta state machine applies the plan.
package placement

import (
	"cmp"
	"slices"
)

// Node is what placement needs to know of a node.
type Node struct {
	ID       uint64
	Replicas int // replicas already on the node
}

// Spread picks rf distinct nodes for each of count new shards, preferring the
// least loaded nodes and breaking ties by id, so the result depends only on
// the input. It returns nil if there are fewer than rf nodes.
func Spread(nodes []Node, count, rf int) [][]uint64 {
	if rf < 1 || len(nodes) < rf {
		return nil
	}
	load := slices.Clone(nodes)
	plan := make([][]uint64, 0, count)
	for range count {
		slices.SortStableFunc(load, func(a, b Node) int {
			if c := cmp.Compare(a.Replicas, b.Replicas); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		picked := make([]uint64, 0, rf)
		for i := range rf {
			picked = append(picked, load[i].ID)
			load[i].Replicas++
		}
		slices.Sort(picked)
		plan = append(plan, picked)
	}
	return plan
}
