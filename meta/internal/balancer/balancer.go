// Package balancer is the rebalance planner of the meta group: a pure
// function from a cluster view to the operations that bring the cluster
// closer to where it should be, in the style of tikv/pd's schedulers. It
// does no I/O, reads no clock and proposes nothing; the executor on the
// meta leader persists and runs what it returns.
//
// Plan applies five rules in priority order, each on the cluster as the
// operations in progress and those planned before it will leave it:
//
//  1. repair: a shard with fewer live replicas than its replication factor
//     (replicas on dead nodes do not count) gets one on the best eligible
//     node, and the dead replica is dropped; shards furthest below their
//     factor first. A shard above its factor loses a replica: one on a
//     draining node first, else one whose loss keeps its zones, on the most
//     loaded node, a follower before the leader.
//  2. drain: replicas on draining nodes move to the best eligible node;
//     a leadership on a draining node whose replica cannot move yet is
//     transferred.
//  3. zone spread: a shard with two replicas in one zone while a zone it
//     lacks has an active node moves one there.
//  4. replica balance: replicas move from the most to the least loaded
//     active node until replicas per node differ by at most one.
//  5. leader balance: when rules 1-4 plan nothing, leaderships are
//     transferred (along a chain of shards when no single transfer helps)
//     until leaders per active node differ by at most one.
//
// Suspect nodes (NodeSuspect) take part in no rule: they receive nothing,
// give nothing and lose nothing, and their replicas count as live.
//
// The best eligible node for a replica is an active node without a replica
// of the shard that spreads it over the most zones, then has the fewest
// replicas, then the fewest disk bytes, then the lowest id. No rule puts two
// replicas of a shard on one node or lowers the number of zones a shard
// spans. At most one operation touches a shard at a time, and a plan holds
// at most Config.MaxOperations.
//
// Plan is deterministic: nodes and shards are walked in id order and every
// choice breaks ties by id, so the same view and config give the same plan.
// It is safe to call from any goroutine; it keeps no state.
package balancer

import (
	"cmp"
	"slices"

	"github.com/sundialmq/sundial/meta"
)

// Reasons an operation is planned, carried in meta.Operation.Reason.
const (
	ReasonRepair         = "repair"
	ReasonOverReplicated = "over-replicated"
	ReasonDrain          = "drain"
	ReasonZoneSpread     = "zone-spread"
	ReasonReplicaBalance = "replica-balance"
	ReasonLeaderBalance  = "leader-balance"
)

// Plan returns the operations that move the cluster of v toward its
// replication factors, off draining and dead nodes, across zones and to
// balanced replica and leader counts; none when there is nothing to do or
// nothing that can be done. cfg must be valid (Config.Validate).
func Plan(v View, cfg Config) []meta.Operation {
	c := newCluster(v, cfg)
	c.repair()
	c.drain()
	c.spreadZones()
	c.balanceReplicas()
	if len(c.plan) == 0 {
		c.balanceLeaders()
	}
	return c.plan
}

// repair plans for shards whose live replicas are not their replication
// factor, the furthest below it first.
func (c *cluster) repair() {
	type want struct {
		sh   *shard
		live int
	}
	var wants []want
	for _, sh := range c.shards {
		if !sh.busy && sh.rf > 0 {
			if live := len(c.live(sh)); live != sh.rf || live != len(sh.replicas) {
				wants = append(wants, want{sh, live})
			}
		}
	}
	slices.SortStableFunc(wants, func(a, b want) int { return cmp.Compare(a.live-a.sh.rf, b.live-b.sh.rf) })
	for _, w := range wants {
		if c.room() == 0 {
			return
		}
		sh, dead := w.sh, c.deadReplica(w.sh)
		switch {
		case w.live < sh.rf:
			if to := c.target(sh, 0); to != nil {
				c.add(meta.NewAddReplica(sh.id, to.ID, dead, ReasonRepair, c.cfg.Timeouts))
			}
		case dead != 0:
			c.add(meta.NewRemoveReplica(sh.id, dead, 0, true, ReasonRepair, c.cfg.Timeouts))
		case w.live > sh.rf:
			from := c.surplus(sh)
			c.add(meta.NewRemoveReplica(sh.id, from, c.leaderAfter(sh, from, 0), false, ReasonOverReplicated, c.cfg.Timeouts))
		}
	}
}

// deadReplica is the lowest node id of sh's replicas on dead nodes, or 0.
func (c *cluster) deadReplica(sh *shard) meta.NodeID {
	for _, r := range sh.replicas {
		if c.byID[r].State == NodeDead {
			return r
		}
	}
	return 0
}

// surplus picks the replica of sh to drop: one on a draining node first,
// then one not on a suspect node, then one whose loss keeps the most
// zones, then the most loaded node, a follower before the leader.
func (c *cluster) surplus(sh *shard) meta.NodeID {
	var best meta.NodeID
	score := func(id meta.NodeID) []int {
		n := c.byID[id]
		draining, available, follower := 0, 1, 0
		if n.State == NodeDraining {
			draining = 1
		}
		if n.State == NodeSuspect {
			available = 0
		}
		if sh.leader != id {
			follower = 1
		}
		return []int{draining, available, c.zones(sh.replicas, id, 0), n.replicas, follower}
	}
	for _, r := range sh.replicas {
		if best == 0 || slices.Compare(score(r), score(best)) > 0 {
			best = r
		}
	}
	return best
}

// drain moves replicas off draining nodes.
func (c *cluster) drain() {
	for _, n := range c.nodes {
		if n.State != NodeDraining {
			continue
		}
		for _, sh := range slices.Clone(n.held) {
			if c.room() == 0 {
				return
			}
			if sh.busy {
				continue
			}
			if to := c.target(sh, n.ID); to != nil {
				c.move(sh, n.ID, to.ID, ReasonDrain)
			} else if lt := c.leaderAfter(sh, n.ID, 0); lt != 0 {
				c.add(meta.NewTransferLeader(sh.id, n.ID, lt, ReasonDrain, c.cfg.Timeouts))
			}
		}
	}
}

// spreadZones moves a replica of a shard out of a zone holding two of its
// replicas into a zone it lacks.
func (c *cluster) spreadZones() {
	active := c.active()
	if c.zones(ids(active), 0, 0) < 2 {
		return
	}
	for _, sh := range c.shards {
		if c.room() == 0 {
			return
		}
		if sh.busy {
			continue
		}
		live := c.live(sh)
		have := c.zones(live, 0, 0)
		if have == len(live) {
			continue
		}
		// The replica to move: in a shared zone, on the most loaded node,
		// a follower before the leader, the highest id; none off a suspect
		// node.
		var from *node
		for _, r := range live {
			n := c.byID[r]
			if n.State == NodeSuspect || c.zones(live, r, 0) < have {
				continue
			}
			if from == nil || givesBefore(sh, n, from) {
				from = n
			}
		}
		if from == nil {
			continue
		}
		if to := c.target(sh, from.ID); to != nil && c.zones(live, from.ID, to.ID) > have {
			c.move(sh, from.ID, to.ID, ReasonZoneSpread)
		}
	}
}

// balanceReplicas moves replicas from the most to the least loaded active
// nodes. Each move goes from a node to one with at least two replicas
// fewer, so the spread only shrinks and the loop ends.
func (c *cluster) balanceReplicas() {
	active := c.active()
	for c.room() > 0 {
		givers := slices.Clone(active)
		slices.SortFunc(givers, func(a, b *node) int {
			return cmp.Or(cmp.Compare(b.replicas, a.replicas), cmp.Compare(b.DiskBytes, a.DiskBytes), cmp.Compare(a.ID, b.ID))
		})
		if !c.moveOne(givers) {
			return
		}
	}
}

// moveOne plans one move from the most loaded giver that can give to the
// least loaded taker that can take; givers are sorted most loaded first
// (most replicas, most bytes, lowest id), takers are tried from the end.
func (c *cluster) moveOne(givers []*node) bool {
	for _, from := range givers {
		for i := len(givers) - 1; i >= 0; i-- {
			to := givers[i]
			if from.replicas-to.replicas < 2 {
				break
			}
			if sh := c.movable(from, to); sh != nil {
				c.move(sh, from.ID, to.ID, ReasonReplicaBalance)
				return true
			}
		}
	}
	return false
}

// movable is the shard on from to move to to: not busy, without a replica
// on to, not losing a zone; a follower before one from leads, then the
// lowest id.
func (c *cluster) movable(from, to *node) *shard {
	var led *shard
	for _, sh := range from.held {
		if sh.busy || slices.Contains(sh.replicas, to.ID) {
			continue
		}
		if !c.keepsZones(sh, from, to) {
			continue
		}
		if sh.leader != from.ID {
			return sh
		}
		if led == nil {
			led = sh
		}
	}
	return led
}

// keepsZones says moving sh's replica from one node to another leaves sh
// in as many zones: the zone of from stays (another live replica is there)
// or the zone of to is new to sh. It allocates nothing: the replica
// balancer asks it for many pairs.
func (c *cluster) keepsZones(sh *shard, from, to *node) bool {
	if from.zone == to.zone {
		return true
	}
	stays, fresh := false, true
	for _, r := range sh.replicas {
		n := c.byID[r]
		if r == from.ID || n.State == NodeDead {
			continue
		}
		stays = stays || n.zone == from.zone
		fresh = fresh && n.zone != to.zone
	}
	return stays || fresh
}

// givesBefore says a's replica of sh moves before b's: a follower before
// the leader, then the more loaded node.
func givesBefore(sh *shard, a, b *node) bool {
	if af, bf := a.ID != sh.leader, b.ID != sh.leader; af != bf {
		return af
	}
	return lessLoaded(b, a)
}

func ids(ns []*node) []meta.NodeID {
	out := make([]meta.NodeID, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}
