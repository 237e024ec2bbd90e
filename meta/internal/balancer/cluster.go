package balancer

import (
	"cmp"
	"slices"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/meta/internal/placement"
)

// cluster is the working copy a plan is made on: the view with the
// operations in progress and those planned so far applied. Nodes and shards
// are kept in id order; maps are only looked up, never ranged over.
type cluster struct {
	cfg       Config
	nodes     []*node
	byID      map[meta.NodeID]*node
	shards    []*shard
	shardByID map[meta.EventShardID]*shard
	plan      []meta.Operation
}

type node struct {
	Node
	zone     string
	replicas int
	leaders  int
	// held lists the shards with a replica on the node, in id order.
	held []*shard
}

type shard struct {
	id       meta.EventShardID
	rf       int
	replicas []meta.NodeID // in id order
	leader   meta.NodeID
	// busy shards have an operation in progress or planned.
	busy bool
}

func newCluster(v View, cfg Config) *cluster {
	c := &cluster{cfg: cfg, byID: map[meta.NodeID]*node{}, shardByID: map[meta.EventShardID]*shard{}}
	for _, n := range v.Nodes {
		nn := &node{Node: n, zone: n.Labels[cfg.ZoneLabel]}
		c.nodes = append(c.nodes, nn)
		c.byID[n.ID] = nn
	}
	slices.SortFunc(c.nodes, func(a, b *node) int { return cmp.Compare(a.ID, b.ID) })
	for _, s := range v.Shards {
		sh := &shard{id: s.ID, rf: s.ReplicationFactor, leader: s.Leader}
		for _, r := range s.Replicas {
			if c.byID[r] != nil && !slices.Contains(sh.replicas, r) {
				sh.replicas = append(sh.replicas, r)
			}
		}
		slices.Sort(sh.replicas)
		if !slices.Contains(sh.replicas, sh.leader) {
			sh.leader = 0
		}
		c.shards = append(c.shards, sh)
		c.shardByID[s.ID] = sh
	}
	slices.SortFunc(c.shards, func(a, b *shard) int { return cmp.Compare(a.id, b.id) })
	for _, sh := range c.shards {
		for _, r := range sh.replicas {
			n := c.byID[r]
			n.replicas++
			n.held = append(n.held, sh)
		}
		if sh.leader != 0 {
			c.byID[sh.leader].leaders++
		}
	}
	for _, op := range v.InProgress {
		if sh := c.shardByID[op.Shard]; sh != nil && !op.Finished() {
			c.apply(sh, op)
		}
	}
	return c
}

// room is how many more operations the plan may take.
func (c *cluster) room() int { return c.cfg.MaxOperations - len(c.plan) }

// add plans op and applies it to the working copy.
func (c *cluster) add(op meta.Operation) {
	c.plan = append(c.plan, op)
	c.apply(c.shardByID[op.Shard], op)
}

// apply marks sh busy and changes it as op will once done. It reads the
// steps, so an operation in progress that already added its replica is not
// counted twice.
func (c *cluster) apply(sh *shard, op meta.Operation) {
	sh.busy = true
	for _, st := range op.Steps {
		switch st.Kind {
		case meta.StepAddLearner:
			c.addReplica(sh, st.Node)
		case meta.StepTransferLeader:
			c.setLeader(sh, st.Node)
		case meta.StepRemoveReplica:
			c.removeReplica(sh, st.Node)
		}
	}
}

func (c *cluster) addReplica(sh *shard, id meta.NodeID) {
	n := c.byID[id]
	if n == nil {
		return
	}
	i, found := slices.BinarySearch(sh.replicas, id)
	if found {
		return
	}
	sh.replicas = slices.Insert(sh.replicas, i, id)
	n.replicas++
	j, _ := slices.BinarySearchFunc(n.held, sh.id, func(a *shard, id meta.EventShardID) int { return cmp.Compare(a.id, id) })
	n.held = slices.Insert(n.held, j, sh)
}

func (c *cluster) removeReplica(sh *shard, id meta.NodeID) {
	i, found := slices.BinarySearch(sh.replicas, id)
	if !found {
		return
	}
	sh.replicas = slices.Delete(sh.replicas, i, i+1)
	n := c.byID[id]
	n.replicas--
	j, _ := slices.BinarySearchFunc(n.held, sh.id, func(a *shard, id meta.EventShardID) int { return cmp.Compare(a.id, id) })
	n.held = slices.Delete(n.held, j, j+1)
	if sh.leader == id {
		c.setLeader(sh, 0)
	}
}

func (c *cluster) setLeader(sh *shard, id meta.NodeID) {
	if id != 0 && !slices.Contains(sh.replicas, id) {
		return
	}
	if sh.leader != 0 {
		c.byID[sh.leader].leaders--
	}
	sh.leader = id
	if id != 0 {
		c.byID[id].leaders++
	}
}

// live is the replicas of sh on nodes that are not dead.
func (c *cluster) live(sh *shard) []meta.NodeID {
	var out []meta.NodeID
	for _, r := range sh.replicas {
		if c.byID[r].State != NodeDead {
			out = append(out, r)
		}
	}
	return out
}

// zones counts the distinct zones of the nodes in ids, leaving out one
// node (zero: none) and adding another (zero: none).
func (c *cluster) zones(ids []meta.NodeID, without, with meta.NodeID) int {
	seen := make([]string, 0, len(ids)+1)
	for _, id := range ids {
		if id != without {
			seen = append(seen, c.byID[id].zone)
		}
	}
	if with != 0 {
		seen = append(seen, c.byID[with].zone)
	}
	slices.Sort(seen)
	return len(slices.Compact(seen))
}

// target picks the node to receive a replica of sh that replaces the one
// on leaving (zero: an added replica): among the active nodes without a
// replica of sh, the one placement.Better prefers for the zones of sh's live
// replicas other than leaving (a new zone, then the fewest replicas, the
// fewest bytes, the lowest id), the order add_shards places new shards by.
// It returns nil when no node can take one.
func (c *cluster) target(sh *shard, leaving meta.NodeID) *node {
	var zones []string
	for _, id := range c.live(sh) {
		if id != leaving {
			zones = append(zones, c.byID[id].zone)
		}
	}
	var best *node
	for _, n := range c.nodes {
		if n.State != NodeActive || slices.Contains(sh.replicas, n.ID) {
			continue
		}
		if best == nil || placement.Better(n.placement(), best.placement(), zones) {
			best = n
		}
	}
	return best
}

// placement is n as package placement sees it.
func (n *node) placement() placement.Node {
	return placement.Node{ID: uint64(n.ID), Replicas: n.replicas, Zone: n.zone, DiskBytes: n.DiskBytes}
}

// lessLoaded orders nodes by replicas, then bytes, then id (placement.Better
// for nodes of one zone).
func lessLoaded(a, b *node) bool {
	return placement.Better(a.placement(), b.placement(), nil)
}

// leaderAfter is the node to take sh's leadership when leaving (its
// leader) goes: the replica on an active node other than leaving (or the
// node joining, to) with the fewest leaders, then the lowest id. Zero when
// leaving does not lead sh or no node can take over.
func (c *cluster) leaderAfter(sh *shard, leaving, to meta.NodeID) meta.NodeID {
	if sh.leader != leaving || leaving == 0 {
		return 0
	}
	var best *node
	for _, id := range append(slices.Clone(sh.replicas), to) {
		n := c.byID[id]
		if n == nil || id == leaving || n.State != NodeActive {
			continue
		}
		if best == nil || n.leaders < best.leaders || n.leaders == best.leaders && n.ID < best.ID {
			best = n
		}
	}
	if best == nil {
		return 0
	}
	return best.ID
}

// move plans moving sh's replica from one node to another.
func (c *cluster) move(sh *shard, from, to meta.NodeID, reason string) {
	c.add(meta.NewMoveReplica(sh.id, from, to, c.leaderAfter(sh, from, to), reason, c.cfg.Timeouts))
}

// active is the active nodes, in id order.
func (c *cluster) active() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.State == NodeActive {
			out = append(out, n)
		}
	}
	return out
}
