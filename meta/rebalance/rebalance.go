// Package rebalance is the entry to the rebalance planner for code outside
// the meta module (the executor and the Rebalance RPC in the broker): it
// builds the planner's view from the meta state and the shard leaders and
// returns the planner's operations. Like the planner it does no I/O.
package rebalance

import (
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/meta/internal/balancer"
)

// Options tune a plan.
type Options struct {
	// ReplicationFactor is the replicas every shard should have; zero keeps
	// each shard's current count.
	ReplicationFactor int
	// MaxOperations caps the operations of one plan; zero is the
	// planner's default (16).
	MaxOperations int
	// Timeouts bound the planned steps; zero is meta.DefaultStepTimeouts.
	Timeouts meta.StepTimeouts
	// Dead names nodes to treat as dead besides those the meta state
	// declares dead (meta.NodeDead): their replicas are re-created
	// elsewhere.
	Dead map[meta.NodeID]bool
	// Unavailable names nodes to leave alone for now: active nodes the
	// meta leader has not heard from lately, not yet declared dead
	// (operator.Healer.Suspects). They receive no replica and no
	// leadership, and keep theirs: nothing is moved onto or off them, and
	// their replicas still count as live. A draining or dead node stays
	// what it is.
	Unavailable map[meta.NodeID]bool
}

// ReasonRepair is the Reason of the operations that re-create the
// replicas of dead nodes (or fix a shard's replica count).
const ReasonRepair = balancer.ReasonRepair

// Plan returns the operations that balance st's replicas and leaders
// (leaders maps a shard to the node of its leader; missing is unknown),
// planned around st's unfinished operations. Removed nodes are left out,
// but for one force-removed while it still held replicas: it is planned
// as dead, so its replicas are re-created on live nodes. Dead ones
// (meta.NodeDead or Options.Dead) keep their replicas in the view and the
// planner repairs them first. Active nodes in Options.Unavailable are
// planned as suspect: nothing moves onto or off them.
func Plan(st *meta.State, leaders map[meta.EventShardID]meta.NodeID, o Options) []meta.Operation {
	cfg := balancer.DefaultConfig()
	if o.MaxOperations > 0 {
		cfg.MaxOperations = o.MaxOperations
	}
	if o.Timeouts.Step > 0 && o.Timeouts.CatchUp > 0 {
		cfg.Timeouts = o.Timeouts
	}
	return balancer.Plan(View(st, leaders, o), cfg)
}

// View is the planner's view of st.
func View(st *meta.State, leaders map[meta.EventShardID]meta.NodeID, o Options) balancer.View {
	var v balancer.View
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		var state balancer.NodeState
		switch {
		case n.State == meta.NodeRemoved && len(st.HoldingsOf(id).Shards) == 0:
			continue
		case o.Dead[id] || n.State == meta.NodeRemoved || n.State == meta.NodeDead:
			state = balancer.NodeDead
		case n.State == meta.NodeDraining:
			state = balancer.NodeDraining
		case o.Unavailable[id]:
			state = balancer.NodeSuspect
		default:
			state = balancer.NodeActive
		}
		v.Nodes = append(v.Nodes, balancer.Node{ID: id, State: state, Labels: n.Labels})
	}
	for _, id := range st.ShardIDs() {
		sh := st.Shards[id]
		s := balancer.Shard{ID: id, Leader: leaders[id], ReplicationFactor: o.ReplicationFactor}
		for _, r := range sh.Replicas {
			s.Replicas = append(s.Replicas, r.Node)
		}
		if s.ReplicationFactor == 0 {
			s.ReplicationFactor = len(s.Replicas)
		}
		v.Shards = append(v.Shards, s)
	}
	v.InProgress = st.UnfinishedMoves()
	return v
}
