package host

import (
	"slices"
	"sync"

	"github.com/lni/dragonboat/v4"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/proposer"
	"github.com/sundialmq/sundial/meta"
)

// Replicas is the table of the event-shard replicas this node runs, with
// the leader each knows of, and of the leaders peers report for the
// shards it does not host (leader gossip): who leads which shard, and
// the routing-change signal (Changed) the routing table streams follow.
//
// The host's loop goroutine adds and drops replicas and records
// leadership (starting and stopping dispatchers) under mu; the gRPC
// handlers, the executor, the healer, the hand-over goroutine and the
// state machines' notifier read it under mu. Lock order: mu, then a
// dispatcher's own lock.
type Replicas struct {
	nh       *dragonboat.NodeHost
	self     uint64 // this node's id
	grpcAddr string // this node's advertised gRPC address
	meta     *MetaClient

	mu     sync.RWMutex      // guards shards, peerLeaders and changed
	shards map[uint64]*shard // by shard id
	// peerLeaders: shard → leader node id as peers hosting the shard
	// reported it (SetPeerLeaders); used for shards not hosted here.
	peerLeaders map[uint64]uint64
	changed     chan struct{} // closed and replaced on every routing change
}

// shard is one replica running here; its fields are guarded by
// Replicas.mu.
type shard struct {
	id         uint64
	replicaID  uint64
	proposer   *proposer.Proposer
	dispatcher *dispatch.Dispatcher // non-nil while this node leads
	leaderID   uint64               // replica id of the known leader, 0 if none
}

func newReplicas(self uint64, grpcAddr string, m *MetaClient) *Replicas {
	return &Replicas{self: self, grpcAddr: grpcAddr, meta: m, shards: map[uint64]*shard{}, changed: make(chan struct{})}
}

// Leading is the shard's proposer and dispatcher if this node leads it.
type Leading struct {
	Shard      uint64
	Proposer   *proposer.Proposer
	Dispatcher *dispatch.Dispatcher
}

// LeaderInfo says who leads a shard: this node (with its handles), another
// node, or nobody known. It answers ok=false if the shard is not hosted here.
func (r *Replicas) LeaderInfo(id uint64) (lead *Leading, leaderNode uint64, leaderAddr string, ok bool) {
	r.mu.RLock()
	s, hosted := r.shards[id]
	var leading *Leading
	if hosted && s.dispatcher != nil {
		leading = &Leading{Shard: id, Proposer: s.proposer, Dispatcher: s.dispatcher}
	}
	r.mu.RUnlock()
	if !hosted {
		return nil, 0, "", false
	}
	if leading != nil {
		return leading, r.self, r.grpcAddr, true
	}
	leader, _, valid, err := r.nh.GetLeaderID(id)
	if err != nil || !valid {
		return nil, 0, "", true
	}
	node, addr := r.nodeOfReplica(id, leader)
	return nil, node, addr, true
}

// ShardLeader is the node leading shard as this node sees it, 0 when not
// known or not hosted here.
func (r *Replicas) ShardLeader(shard uint64) uint64 {
	_, node, _, ok := r.LeaderInfo(shard)
	if !ok {
		return 0
	}
	return node
}

// nodeOfReplica is the node and gRPC address meta places replicaID of
// shardID on; 0 and empty when it places none.
func (r *Replicas) nodeOfReplica(shardID, replicaID uint64) (uint64, string) {
	st := r.meta.Meta()
	sh, ok := st.Shards[meta.EventShardID(shardID)]
	if !ok {
		return 0, ""
	}
	for _, rep := range sh.Replicas {
		if uint64(rep.ID) == replicaID {
			if n, ok := st.Nodes[rep.Node]; ok {
				return uint64(n.ID), n.GRPCAddr
			}
		}
	}
	return 0, ""
}

// ShardLeaders maps every event shard to its leader's node id (0 unknown):
// hosted shards as this node sees them, the others as peers that host them
// last reported (SetPeerLeaders), so the routing table this broker serves
// names the leaders of shards it holds no replica of.
func (r *Replicas) ShardLeaders() map[uint64]uint64 {
	out := r.LocalShardLeaders()
	r.mu.RLock()
	defer r.mu.RUnlock()
	for id, leader := range r.peerLeaders {
		if _, hosted := out[id]; !hosted {
			out[id] = leader
		}
	}
	return out
}

// SetPeerLeaders records the leaders peers reported for shards this node
// may not host; a change of those the routing table shows notifies
// WatchRouting.
func (r *Replicas) SetPeerLeaders(leaders map[uint64]uint64) {
	r.mu.Lock()
	changed := false
	for id, leader := range leaders {
		if _, hosted := r.shards[id]; !hosted && r.peerLeaders[id] != leader {
			changed = true
		}
	}
	for id := range r.peerLeaders {
		if _, ok := leaders[id]; !ok {
			changed = true
		}
	}
	r.peerLeaders = leaders
	r.mu.Unlock()
	if changed {
		r.notifyChanged()
	}
}

// LocalShardLeaders maps each hosted shard to its leader's node id (0
// unknown).
func (r *Replicas) LocalShardLeaders() map[uint64]uint64 {
	r.mu.RLock()
	type pair struct{ id, leader uint64 }
	var ps []pair
	for id, s := range r.shards {
		ps = append(ps, pair{id, s.leaderID})
	}
	r.mu.RUnlock()
	out := make(map[uint64]uint64, len(ps))
	for _, p := range ps {
		node, _ := r.nodeOfReplica(p.id, p.leader)
		out[p.id] = node
	}
	return out
}

// HostedShards lists the event shards with a replica here, ascending.
func (r *Replicas) HostedShards() []uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ids := make([]uint64, 0, len(r.shards))
	for id := range r.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// HostsShard reports whether a replica of shard runs on this node.
func (r *Replicas) HostsShard(shard uint64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.shards[shard]
	return ok
}

// get is the replica of shard running here, nil if none.
func (r *Replicas) get(shard uint64) *shard {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.shards[shard]
}

// leading is the proposer and replica id of shard's replica while this
// node leads it (its dispatcher runs); nil when it does not.
func (r *Replicas) leading(shard uint64) (*proposer.Proposer, uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s := r.shards[shard]; s != nil && s.dispatcher != nil {
		return s.proposer, s.replicaID
	}
	return nil, 0
}

// put records s as the replica of its shard running here.
func (r *Replicas) put(s *shard) {
	r.mu.Lock()
	r.shards[s.id] = s
	r.mu.Unlock()
}

// forget drops s from the table if it is still the replica of its shard;
// it reports whether it was.
func (r *Replicas) forget(s *shard) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shards[s.id] != s {
		return false
	}
	delete(r.shards, s.id)
	return true
}

// stopAll stops every dispatcher and proposer; the host's loop has ended.
func (r *Replicas) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.shards {
		if s.dispatcher != nil {
			s.dispatcher.Stop()
			s.dispatcher = nil
		}
		s.proposer.Close()
	}
}

// wake is the state machines' notifier: it runs on the apply goroutine.
func (r *Replicas) wake(id uint64, c fsm.Change) {
	r.mu.RLock()
	s := r.shards[id]
	var d *dispatch.Dispatcher
	if s != nil {
		d = s.dispatcher
	}
	r.mu.RUnlock()
	if d != nil {
		d.Changed(c.Lows, c.ExpiryLow, c.Reset)
	}
}

func (r *Replicas) notifyChanged() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Changed returns a channel closed at the next routing change.
func (r *Replicas) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}
