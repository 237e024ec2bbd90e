// Package placement decides which nodes take new event-shard replicas. It
// is pure: it takes the candidate nodes with their loads and zones and
// returns choices; the meta state machine (add_shards, including the
// bootstrap) and the rebalance planner (meta/internal/balancer) apply them.
// Both choose by the same order, Better: a node that adds a zone the shard
// does not span yet, then the fewest replicas, then the fewest disk bytes,
// then the lowest id. Nodes without a zone are all in the zone "".
package placement

import "slices"

// Node is what placement needs to know of a candidate node.
type Node struct {
	ID       uint64
	Replicas int    // replicas already on the node
	Zone     string // the node's zone label, "" when it has none
	// DiskBytes is the node's data size, zero when not known.
	DiskBytes int64
}

// Pick returns the index in candidates of the node to take one more
// replica of a shard whose replicas are in zones (see Better), or -1 when
// candidates is empty. The caller leaves out the nodes that must not take
// it (those holding a replica of the shard, those not active).
func Pick(candidates []Node, zones []string) int {
	best := -1
	for i := range candidates {
		if best < 0 || Better(candidates[i], candidates[best], zones) {
			best = i
		}
	}
	return best
}

// Better reports whether a should take a replica of a shard whose
// replicas are in zones before b: a adds a zone and b does not, or both do
// alike and a has fewer replicas, then fewer disk bytes, then a lower id.
func Better(a, b Node, zones []string) bool {
	newA, newB := !slices.Contains(zones, a.Zone), !slices.Contains(zones, b.Zone)
	switch {
	case newA != newB:
		return newA
	case a.Replicas != b.Replicas:
		return a.Replicas < b.Replicas
	case a.DiskBytes != b.DiskBytes:
		return a.DiskBytes < b.DiskBytes
	}
	return a.ID < b.ID
}

// Spread picks rf distinct nodes for each of count new shards, one replica
// at a time by Pick (so a shard spans as many zones as the nodes offer,
// and the least loaded nodes fill first), counting each pick in the loads
// of the shards after it. The result depends only on the input. It returns
// nil if there are fewer than rf nodes.
func Spread(nodes []Node, count, rf int) [][]uint64 {
	if rf < 1 || len(nodes) < rf {
		return nil
	}
	load := slices.Clone(nodes)
	plan := make([][]uint64, 0, count)
	for range count {
		picked := make([]uint64, 0, rf)
		zones := make([]string, 0, rf)
		free := slices.Clone(load)
		for range rf {
			i := Pick(free, zones)
			picked = append(picked, free[i].ID)
			zones = append(zones, free[i].Zone)
			free = slices.Delete(free, i, i+1)
		}
		for i := range load {
			if slices.Contains(picked, load[i].ID) {
				load[i].Replicas++
			}
		}
		slices.Sort(picked)
		plan = append(plan, picked)
	}
	return plan
}
