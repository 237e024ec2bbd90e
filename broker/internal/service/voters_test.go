package service

import (
	"slices"

	"github.com/sundialmq/sundial/meta"
)

// membershipOf is a meta group membership (voting or not) of the replicas on
// nodes ids, as Dragonboat lists one: replica id to address.
func membershipOf(ids ...uint64) map[uint64]string {
	m := map[uint64]string{}
	for _, id := range ids {
		m[id] = "r"
	}
	return m
}

// sixNodeState is a meta state of nodes 1-6, active but for those in draining.
func sixNodeState(draining []uint64) *meta.State {
	st := meta.NewState()
	for id := meta.NodeID(1); id <= 6; id++ {
		st.Nodes[id] = &meta.Node{ID: id, State: meta.NodeActive}
	}
	for _, id := range draining {
		st.Nodes[meta.NodeID(id)].State = meta.NodeDraining
	}
	return st
}

// answeringBut is a probe under which every node answers but those in down.
func answeringBut(down []uint64) func(*meta.Node) bool {
	return func(n *meta.Node) bool { return !slices.Contains(down, uint64(n.ID)) }
}
