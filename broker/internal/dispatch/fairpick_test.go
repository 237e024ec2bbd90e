package dispatch

import "github.com/sundialmq/sundial/broker/internal/keys"

// pick takes up to limit of k's due items, given by fairness key, fairly,
// as a round does from the store: the keys of byFairnessKey are the active
// keys of k's tree (partition 0) and each key's items are served in order.
// The weighted order's unit tests use it.
func (s *fairScheduler) pick(k queueKey, byFairnessKey map[string][]dueItem, limit int, weights map[string]int32) []dueItem {
	t := s.tree(keys.Queue{Topic: k.topic, Group: k.group})
	for _, n := range t.nodes {
		if n.leaf != nil {
			if _, ok := byFairnessKey[n.leaf.fairnessKey]; !ok {
				t.deactivate(n)
			}
		}
	}
	for fk := range byFairnessKey {
		t.activate(fk)
	}
	served := map[string]int{}
	return t.round(limit, weights, func(n *fairNode) (dueItem, bool) {
		fk := n.leaf.fairnessKey
		items := byFairnessKey[fk]
		if served[fk] >= len(items) {
			return dueItem{}, false
		}
		served[fk]++
		return items[served[fk]-1], true
	})
}
