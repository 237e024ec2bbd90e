package meta

import "slices"

// Holdings is what a node still holds in the meta state: what keeps it
// from being removed.
type Holdings struct {
	// Shards lists the shards with a replica on the node, ascending.
	Shards []EventShardID
	// Operations lists the unfinished operations that name the node (as
	// the node they move from or to, or in a step), ascending.
	Operations []OperationID
	// LastHolder lists the shards whose only replica not on a removed or
	// dead node is the node's, ascending: removing the node would lose
	// them.
	LastHolder []EventShardID
}

// Empty says the node holds nothing.
func (h Holdings) Empty() bool { return len(h.Shards) == 0 && len(h.Operations) == 0 }

// HoldingsOf answers what node n holds.
func (s *State) HoldingsOf(n NodeID) Holdings {
	var h Holdings
	for _, id := range s.ShardIDs() {
		sh := s.Shards[id]
		if _, ok := sh.ReplicaOn(n); !ok {
			continue
		}
		h.Shards = append(h.Shards, id)
		last := true
		for _, r := range sh.Replicas {
			if r.Node != n && s.live(r.Node) {
				last = false
			}
		}
		if last {
			h.LastHolder = append(h.LastHolder, id)
		}
	}
	for _, id := range s.OperationIDs() {
		op := s.Operations[id]
		if op.Finished() {
			continue
		}
		if op.From == n || op.To == n || slices.ContainsFunc(op.Steps, func(st Step) bool { return st.Node == n }) {
			h.Operations = append(h.Operations, id)
		}
	}
	return h
}

// live says node n is registered and neither removed nor dead.
func (s *State) live(n NodeID) bool {
	nd := s.Nodes[n]
	return nd != nil && nd.State != NodeRemoved && nd.State != NodeDead
}

// MetaVoters lists the nodes recorded as meta voters, ascending.
func (s *State) MetaVoters() []NodeID {
	var ids []NodeID
	for _, id := range s.NodeIDs() {
		if s.Nodes[id].MetaVoter {
			ids = append(ids, id)
		}
	}
	return ids
}

// setNodeState moves node id to state to. The moves allowed are active →
// draining, draining → active (undrain), and draining or dead → removed;
// moving to the state the node is in is ResultNoop, any other move (and
// every move of a removed node: removal is final) ResultInvalid, an
// unknown id ResultNotFound. Removal is refused with ResultHoldsReplicas
// while the node holds a replica or an unfinished operation names it;
// force lifts that (and allows removing an active node), for a node that
// is dead or unreachable, whose replicas are then re-created elsewhere
// by the next plan. Removing the last live holder of a shard's replica is
// refused even with force. A removed node's record stays, no longer a
// meta voter, so its id and incarnation are never reused. Deciding here,
// in apply, orders the refusal with every move the executor records: no
// move can land on the node between the check and the removal.
func (s *State) setNodeState(id NodeID, to NodeState, force bool) uint64 {
	n, ok := s.Nodes[id]
	if !ok {
		return ResultNotFound
	}
	if n.State == to {
		return ResultNoop
	}
	switch {
	case n.State == NodeActive && to == NodeDraining,
		n.State == NodeDraining && to == NodeActive:
	case to == NodeRemoved && (n.State == NodeDraining || n.State == NodeDead || (force && n.State == NodeActive)):
		h := s.HoldingsOf(id)
		if len(h.LastHolder) > 0 || (!force && !h.Empty()) {
			return ResultHoldsReplicas
		}
		n.MetaVoter, n.BeforeDead = false, ""
	default:
		return ResultInvalid
	}
	n.State = to
	s.Version++
	return ResultOK
}

// setMetaVoter records whether node id votes in the meta group, as the
// meta leader changed the group's membership. A removed node never votes
// again (ResultInvalid).
func (s *State) setMetaVoter(id NodeID, voter bool) uint64 {
	n, ok := s.Nodes[id]
	switch {
	case !ok:
		return ResultNotFound
	case n.MetaVoter == voter:
		return ResultNoop
	case voter && n.State == NodeRemoved:
		return ResultInvalid
	}
	n.MetaVoter = voter
	s.Version++
	return ResultOK
}
