package balancer

import (
	"cmp"
	"slices"

	"github.com/sundialmq/sundial/meta"
)

// hop is one leadership transfer of a chain.
type hop struct {
	sh       *shard
	from, to meta.NodeID
}

// balanceLeaders transfers leaderships from active nodes leading many
// shards to active nodes leading few. A leadership can only go to a node
// with a replica of the shard, so when no follower of the busiest node's
// shards leads few enough, it goes along a chain: the busiest node hands a
// shard to a follower, which hands one of its own to the next, and so on
// to a node leading at least two fewer. Every chain lowers the sum of
// squared leader counts, so the loop ends; it ends when no node leads two
// more than a node it can reach.
func (c *cluster) balanceLeaders() {
	active := c.active()
	for c.room() > 0 {
		givers := slices.Clone(active)
		slices.SortStableFunc(givers, func(a, b *node) int { return cmp.Compare(b.leaders, a.leaders) })
		chain := c.shortestChain(givers, 1)
		if chain == nil {
			chain = c.shortestChain(givers, len(c.nodes))
		}
		if chain == nil || len(chain) > c.room() {
			return
		}
		for _, h := range chain {
			c.add(meta.NewTransferLeader(h.sh.id, h.from, h.to, ReasonLeaderBalance, c.cfg.Timeouts))
		}
	}
}

// shortestChain is the chain of at most depth transfers of the first giver
// that has one, givers tried in order. A direct transfer from any giver is
// preferred to a chain from one tried earlier, so balanceLeaders asks for
// depth 1 first.
func (c *cluster) shortestChain(givers []*node, depth int) []hop {
	for _, from := range givers {
		if chain := c.leaderChain(from, depth); chain != nil {
			return chain
		}
	}
	return nil
}

// leaderChain is the shortest chain of at most depth transfers from src to
// an active node leading at least two shards fewer (of those at that distance, the one
// leading fewest, then the first reached), or nil. The search walks shards
// in id order, so the chain depends only on the cluster.
func (c *cluster) leaderChain(src *node, depth int) []hop {
	via := map[meta.NodeID]hop{src.ID: {}}
	level := []*node{src}
	for ; len(level) > 0 && depth > 0; depth-- {
		var next []*node
		var goal *node
		for _, u := range level {
			for _, sh := range u.held {
				if sh.leader != u.ID || sh.busy {
					continue
				}
				for _, r := range sh.replicas {
					v := c.byID[r]
					if _, seen := via[r]; seen || v.State != NodeActive {
						continue
					}
					via[r] = hop{sh: sh, from: u.ID, to: r}
					next = append(next, v)
					if v.leaders <= src.leaders-2 && (goal == nil || v.leaders < goal.leaders) {
						goal = v
					}
				}
			}
		}
		if goal != nil {
			var chain []hop
			for id := goal.ID; id != src.ID; id = via[id].from {
				chain = append(chain, via[id])
			}
			slices.Reverse(chain)
			return chain
		}
		level = next
	}
	return nil
}
