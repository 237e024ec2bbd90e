package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/broker/internal/proposer"
	"github.com/sundialmq/sundial/meta"
)

// placement follows the meta state's placement of event-shard replicas on
// this node: it starts the replicas placed here (a joining one on an
// empty key range), drops those no longer placed with their Raft data and
// keys, clears the data of replicas removed while the node was down, and
// reports the operation steps only this node can complete (wait-catch-up
// of a replica joining here, delete-data of one removed from here). It
// decides nothing for the cluster. Only the host's loop goroutine calls
// it; it records the replicas it starts and drops in Replicas.
type placement struct {
	cfg      Config
	log      *zap.Logger
	nh       *dragonboat.NodeHost
	db       *pebble.DB
	replicas *Replicas
	meta     *MetaClient
	propM    *proposer.Metrics
}

// startPlaced starts the replicas st places on this node that do not run
// here yet (joining the ones an operation placed), replacing a replica of
// an earlier placement of the shard.
func (p *placement) startPlaced(ctx context.Context, st *meta.State) {
	self := meta.NodeID(p.cfg.NodeID)
	for _, id := range st.ShardIDs() {
		sh := st.Shards[id]
		r, ok := sh.ReplicaOn(self)
		if !ok {
			continue
		}
		s := p.replicas.get(uint64(id))
		running := s != nil
		if running && s.replicaID != uint64(r.ID) {
			// An earlier replica of the shard runs here: a move onto this
			// node rolled back and was planned again (a new replica id)
			// while this node was down or behind, so it never saw the
			// shard unplaced. The old replica left the membership (once
			// it applies that, Dragonboat stops it): drop it and its data,
			// then start the one placed.
			p.log.Warn("replacing a replica of an earlier placement", zap.Uint64("shard_id", uint64(id)),
				zap.Uint64("replica_id", s.replicaID), zap.Uint64("placed_replica_id", uint64(r.ID)))
			if err := p.dropReplica(ctx, uint64(id), s); err != nil {
				p.log.Error("drop a replica of an earlier placement", zap.Uint64("shard_id", uint64(id)), zap.Uint64("replica_id", s.replicaID), zap.Error(err))
				continue
			}
			running = false
		}
		if !running {
			start := p.startShard
			if r.Join {
				start = func(ctx context.Context, _ *meta.State, sh *meta.Shard, r meta.Replica) error {
					return p.startJoining(ctx, sh, r)
				}
			}
			switch err := start(ctx, st, sh, r); {
			case errors.Is(err, dragonboat.ErrReplicaRemoved):
				// A move took the replica off this node while it was down,
				// and this node's copy of the meta state predates the move:
				// the next meta update unplaces it here.
				p.log.Info("shard replica was moved off this node; waiting for the meta state to say so",
					zap.Uint64("shard_id", uint64(id)), zap.Uint64("replica_id", uint64(r.ID)))
			case err != nil:
				p.log.Error("start shard replica", zap.Uint64("shard_id", uint64(id)), zap.Error(err))
			}
		}
	}
}

func (p *placement) startShard(ctx context.Context, st *meta.State, sh *meta.Shard, r meta.Replica) error {
	members := map[uint64]dragonboat.Target{}
	if !p.nh.HasNodeInfo(uint64(sh.ID), uint64(r.ID)) {
		for _, rep := range sh.Replicas {
			members[uint64(rep.ID)] = st.Nodes[rep.Node].RaftAddr
		}
	}
	return p.startReplica(ctx, sh, r, members, false)
}

// startReplica starts r of sh with members (none when it restarts on its
// data or joins a running shard); join is Dragonboat's join flag.
func (p *placement) startReplica(ctx context.Context, sh *meta.Shard, r meta.Replica, members map[uint64]dragonboat.Target, join bool) error {
	id := uint64(sh.ID)
	s := &shard{id: id, replicaID: uint64(r.ID)}
	s.proposer = proposer.New(ctx, p.nh, id, p.cfg.Proposer, p.log, p.propM)
	p.replicas.put(s)
	cfg := shardConfig(p.cfg, id, uint64(r.ID))
	// A replica placed by an operation (r.Join) was added as a non-voting
	// member (a learner), and the executor promotes it once it has caught
	// up. It starts non-voting on every start, not only the first: a restart
	// replays the Raft log after its last snapshot, and replaying its own
	// add-non-voting entry panics in a replica started voting ("is not a
	// nonVoting"). A promoted replica comes back voting either way: by
	// replaying its promotion, or, when a snapshot taken after the promotion
	// lists it as a voter, by Dragonboat restoring the snapshot's members at
	// start (raft.restoreRemotes turns a non-voting self into a follower).
	cfg.IsNonVoting = r.Join
	err := p.nh.StartOnDiskReplica(members, join, fsm.Factory(p.db, p.replicas.wake), cfg)
	if err != nil {
		p.replicas.forget(s)
		s.proposer.Close()
		return err
	}
	p.log.Info("shard replica started", zap.Uint64("shard_id", id), zap.Uint64("replica_id", uint64(r.ID)), zap.Bool("join", join))
	return nil
}

// startJoining starts r, a replica added to a running shard, with
// join=true and no initial members: it catches up from the leader. On its
// first start nothing of an earlier replica of the shard may be left on
// this node (one a rolled-back move placed here): its Raft data is removed
// and the shard's key range deleted, so r's state machine opens empty
// (Open answers the applied index of the keys it finds) and takes the
// leader's snapshot.
func (p *placement) startJoining(ctx context.Context, sh *meta.Shard, r meta.Replica) error {
	id := uint64(sh.ID)
	join := !p.nh.HasNodeInfo(id, uint64(r.ID))
	if join {
		for _, ni := range p.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{}).LogInfo {
			if ni.ShardID != id || ni.ReplicaID == uint64(r.ID) {
				continue
			}
			p.log.Warn("removing the data of an earlier replica before a replica joins", zap.Uint64("shard_id", id),
				zap.Uint64("replica_id", ni.ReplicaID), zap.Uint64("placed_replica_id", uint64(r.ID)))
			if err := p.removeData(ctx, id, ni.ReplicaID); err != nil {
				return fmt.Errorf("remove earlier replica %d: %w", ni.ReplicaID, err)
			}
		}
		if err := p.db.DeleteRange(keys.ShardPrefix(id), keys.ShardEnd(id), pebble.Sync); err != nil {
			return fmt.Errorf("delete key range before a join: %w", err)
		}
	}
	return p.startReplica(ctx, sh, r, nil, join)
}

// dropReplica stops s, a replica running here, removes its Raft data and
// its shard's key range, and forgets it; on an error s stays, to be
// dropped again.
func (p *placement) dropReplica(ctx context.Context, id uint64, s *shard) error {
	if err := p.removeData(ctx, id, s.replicaID); err != nil {
		return err
	}
	p.replicas.forget(s)
	if s.dispatcher != nil {
		s.dispatcher.Stop()
	}
	s.proposer.Close()
	p.replicas.notifyChanged()
	return nil
}

// dropUnplaced stops the replicas running here that the meta state no
// longer places on this node, removes their Raft data and deletes their
// key range from the state DB; it does the same for the replicas on disk
// here that never started since this node's start (dropStale); then it
// reports the delete-data step of the operation that removed the replica,
// if one waits for it.
func (p *placement) dropUnplaced(ctx context.Context, st *meta.State) {
	self := meta.NodeID(p.cfg.NodeID)
	for _, id := range p.replicas.HostedShards() {
		sh, ok := st.Shards[meta.EventShardID(id)]
		if ok {
			if _, placed := sh.ReplicaOn(self); placed {
				continue
			}
		}
		s := p.replicas.get(id)
		if s == nil || !p.replicas.forget(s) {
			continue
		}
		if s.dispatcher != nil {
			s.dispatcher.Stop()
		}
		s.proposer.Close()
		if err := p.removeData(ctx, id, s.replicaID); err != nil {
			p.log.Error("remove data of a replica no longer placed here", zap.Uint64("shard_id", id), zap.Uint64("replica_id", s.replicaID), zap.Error(err))
			continue
		}
		p.log.Info("shard replica removed from this node", zap.Uint64("shard_id", id), zap.Uint64("replica_id", s.replicaID))
		p.replicas.notifyChanged()
	}
	p.dropStale(ctx, st)
	p.reportSteps(ctx, st)
}

// dropStale removes the Raft data and key range of the replicas on this
// node's disk that do not run and that st shows were taken off this node
// for good (staleReplicas): a replica removed while the node was down,
// whose removal the node's first meta state at start-up already held, so
// it never started (dropUnplaced's loop over running replicas never sees
// it). This is the clean-up a skipped delete-data step leaves to the node.
func (p *placement) dropStale(ctx context.Context, st *meta.State) {
	running := map[uint64]bool{}
	for _, id := range p.replicas.HostedShards() {
		running[id] = true
	}
	for _, ni := range staleReplicas(st, meta.NodeID(p.cfg.NodeID), p.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{}).LogInfo, running) {
		if err := p.removeData(ctx, ni.ShardID, ni.ReplicaID); err != nil {
			p.log.Error("remove data of a replica no longer placed here", zap.Uint64("shard_id", ni.ShardID), zap.Uint64("replica_id", ni.ReplicaID), zap.Error(err))
			continue
		}
		p.log.Info("data of a replica no longer placed here removed", zap.Uint64("shard_id", ni.ShardID), zap.Uint64("replica_id", ni.ReplicaID))
	}
}

// staleReplicas picks from onDisk (the replicas with Raft data here) the
// ones st shows were taken off node self for good, so their data can go:
// an event shard's replica that does not run here (running: by shard),
// whose shard st places no replica of on self (when it places one, the
// join of that replica clears the old data: startJoining), whose id st has
// handed out (below NextReplicaID) and that no unfinished operation is
// adding. A meta state behind this node's disk (replayed at start-up) may
// not place a replica yet that a later one places; such a replica is still
// being added in it or not handed out yet, so it is never picked.
func staleReplicas(st *meta.State, self meta.NodeID, onDisk []raftio.NodeInfo, running map[uint64]bool) []raftio.NodeInfo {
	adding := map[meta.ReplicaID]bool{}
	for _, op := range st.Unfinished() {
		if op.NewReplica != 0 {
			adding[op.NewReplica] = true
		}
	}
	var out []raftio.NodeInfo
	for _, ni := range onDisk {
		r := meta.ReplicaID(ni.ReplicaID)
		if ni.ShardID == meta.ShardID || running[ni.ShardID] || r >= st.NextReplicaID || adding[r] {
			continue
		}
		if sh, ok := st.Shards[meta.EventShardID(ni.ShardID)]; ok {
			if _, placed := sh.ReplicaOn(self); placed {
				continue
			}
		}
		out = append(out, ni)
	}
	return out
}

// removeData stops shard's replica and deletes its Raft data and its keys.
func (p *placement) removeData(ctx context.Context, shard, replica uint64) error {
	if err := p.nh.StopReplica(shard, replica); err != nil && !errors.Is(err, dragonboat.ErrShardNotFound) {
		return fmt.Errorf("stop replica: %w", err)
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.nh.SyncRemoveData(cctx, shard, replica)
		cancel()
		if err == nil {
			break
		}
		if !dragonboat.IsTempError(err) && !errors.Is(err, dragonboat.ErrShardNotStopped) || ctx.Err() != nil {
			return fmt.Errorf("remove raft data: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.db.DeleteRange(keys.ShardPrefix(shard), keys.ShardEnd(shard), pebble.Sync); err != nil {
		return fmt.Errorf("delete key range: %w", err)
	}
	return nil
}

// reportSteps completes the steps the executor waits for this node to do:
// wait-catch-up for a joining replica here that has caught up (a read
// index served by it), delete-data for a replica removed from here.
func (p *placement) reportSteps(ctx context.Context, st *meta.State) {
	self := meta.NodeID(p.cfg.NodeID)
	for _, op := range st.Unfinished() {
		if op.Current >= len(op.Steps) || op.Steps[op.Current].Node != self {
			continue
		}
		switch op.Steps[op.Current].Kind {
		case meta.StepWaitCatchUp:
			if !p.caughtUp(uint64(op.Shard)) {
				continue
			}
		case meta.StepDeleteData:
			if p.replicas.HostsShard(uint64(op.Shard)) {
				continue
			}
		default:
			continue
		}
		p.meta.propose(ctx, &meta.Command{Op: meta.OpAdvanceOperation, OperationID: op.ID, Step: op.Current})
		p.log.Info("operation step done here", zap.Uint64("shard_id", uint64(op.Shard)), zap.Uint64("operation_id", uint64(op.ID)),
			zap.String("step", string(op.Steps[op.Current].Kind)))
	}
}

// caughtUp reports whether shard's local replica serves a read index: it
// has then applied everything the leader had committed when asked.
func (p *placement) caughtUp(shard uint64) bool {
	if !p.replicas.HostsShard(shard) {
		return false
	}
	rs, err := p.nh.ReadIndex(shard, 2*time.Second)
	if err != nil {
		return false
	}
	defer rs.Release()
	r := <-rs.ResultC()
	return r.Completed()
}
