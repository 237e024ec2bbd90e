package dispatch

import (
	"slices"
	"strings"
)

// fairState is the weighted fair queueing state of one FAIR queue: the
// virtual time of every node of the fairness-key tree ("tenant",
// "tenant.job") that had due messages in the last round. A node served
// once advances by 1/weight; the next pick at each level goes to the
// child with the least virtual time, so a flooding key cannot starve a
// trickling one and weights split deliveries in proportion. A node that
// comes back after being idle starts at its active siblings' minimum, so
// idleness earns no credit. Bounded by the keys with due messages.
type fairState struct {
	vt     map[string]float64
	active map[string]bool
}

// fairScheduler owns the weighted fair queueing state of the FAIR queues
// that attached consumers read.
//
// It has no lock of its own: only the loop touches it (picking and
// pruning), under the dispatcher's mu.
type fairScheduler struct {
	queues map[queueKey]*fairState
}

func newFairScheduler() *fairScheduler { return &fairScheduler{queues: map[queueKey]*fairState{}} }

// pick takes up to limit of k's due items, given by fairness key, fairly.
func (s *fairScheduler) pick(k queueKey, byFairnessKey map[string][]dueItem, limit int, weights map[string]int32) []dueItem {
	st, ok := s.queues[k]
	if !ok {
		st = &fairState{vt: map[string]float64{}, active: map[string]bool{}}
		s.queues[k] = st
	}
	return st.pick(byFairnessKey, limit, weights)
}

// prune drops the state of queues nobody reads.
func (s *fairScheduler) prune(read func(queueKey) bool) {
	for k := range s.queues {
		if !read(k) {
			delete(s.queues, k)
		}
	}
}

// noKey is the tree node of messages without a fairness key: a leaf of the
// root like any other key.
const noKey = "\x00"

// pick takes up to limit items from the per-key lists, fairly.
func (st *fairState) pick(byFairnessKey map[string][]dueItem, limit int, weights map[string]int32) []dueItem {
	byKey := make(map[string][]dueItem, len(byFairnessKey))
	for fk, items := range byFairnessKey {
		if fk == "" {
			fk = noKey
		}
		byKey[fk] = items
	}
	// Every tree node with due items, and the leaves under each parent.
	children := map[string][]string{} // parent path → child paths
	active := map[string]bool{}
	for fk := range byKey {
		parts := strings.Split(fk, ".")
		parent := ""
		for i := range parts {
			node := strings.Join(parts[:i+1], ".")
			if !active[node] {
				active[node] = true
				children[parent] = append(children[parent], node)
			}
			parent = node
		}
	}
	for parent, cs := range children {
		slices.Sort(cs)
		floor := -1.0
		for _, c := range cs {
			if st.active[c] && (floor < 0 || st.vt[c] < floor) {
				floor = st.vt[c]
			}
		}
		for _, c := range cs {
			if !st.active[c] && floor >= 0 {
				st.vt[c] = max(st.vt[c], floor)
			}
		}
		children[parent] = cs
	}
	// Forget nodes that went idle, so the state stays bounded.
	for node := range st.vt {
		if !active[node] {
			delete(st.vt, node)
		}
	}
	st.active = active
	remaining := map[string]int{}
	for fk, items := range byKey {
		remaining[fk] = len(items)
	}
	var out []dueItem
	for len(out) < limit {
		leaf, ok := st.descend("", children, byKey, remaining, weights)
		if !ok {
			break
		}
		items := byKey[leaf]
		out = append(out, items[len(items)-remaining[leaf]])
		remaining[leaf]--
	}
	return out
}

// descend walks from parent to the leaf to serve next, charging every node
// on the way; ok is false when nothing is left below parent.
func (st *fairState) descend(parent string, children map[string][]string, byKey map[string][]dueItem, remaining map[string]int, weights map[string]int32) (string, bool) {
	var best string
	found := false
	for _, c := range children[parent] {
		if !st.hasWork(c, children, byKey, remaining) {
			continue
		}
		if !found || st.vt[c] < st.vt[best] {
			best, found = c, true
		}
	}
	if !found {
		if _, isLeaf := byKey[parent]; isLeaf && parent != "" && remaining[parent] > 0 {
			return parent, true
		}
		return "", false
	}
	w := float64(1)
	if v, ok := weights[best]; ok && v > 0 {
		w = float64(v)
	}
	st.vt[best] += 1 / w
	// A key can be both a leaf and a parent ("a" and "a.b"): serve the
	// node itself when its own items are due and its children are not.
	if leaf, ok := st.descend(best, children, byKey, remaining, weights); ok {
		return leaf, true
	}
	return best, remaining[best] > 0
}

func (st *fairState) hasWork(node string, children map[string][]string, byKey map[string][]dueItem, remaining map[string]int) bool {
	if remaining[node] > 0 {
		return true
	}
	for _, c := range children[node] {
		if st.hasWork(c, children, byKey, remaining) {
			return true
		}
	}
	return false
}
