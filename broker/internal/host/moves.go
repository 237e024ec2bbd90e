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

	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/meta"
)

// The membership changes of a replica move (DESIGN.md §6). Each is
// idempotent, so an executor that resumes an operation after a meta-leader
// change may run a step again: a replica already added (or already gone)
// is success. Each needs a replica of the shard on this node, through
// which Dragonboat proposes the change to the shard's leader.

// membership reads shard's membership linearizably, retrying temporary
// errors (ErrShardNotReady after a config change) until ctx ends.
func (h *Host) membership(ctx context.Context, shard uint64) (*dragonboat.Membership, error) {
	for {
		m, err := h.withRetry(ctx, func(ctx context.Context) (*dragonboat.Membership, error) {
			return h.nh.SyncGetShardMembership(ctx, shard)
		})
		if err == nil {
			return m, nil
		}
		if !dragonboat.IsTempError(err) && !errors.Is(err, dragonboat.ErrShardNotReady) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("shard %d membership: %w", shard, err)
		}
	}
}

// withRetry runs f with a deadline of at most 3s, retrying temporary
// errors until ctx ends.
func (h *Host) withRetry(ctx context.Context, f func(context.Context) (*dragonboat.Membership, error)) (*dragonboat.Membership, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := f(cctx)
		cancel()
		if err == nil || !dragonboat.IsTempError(err) || ctx.Err() != nil {
			return m, err
		}
		h.log.Debug("membership read failed: retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// change runs one config change with the current ConfigChangeID, retrying
// temporary errors and a stale ConfigChangeID (another change committed
// in between) until ctx ends; done reports from a fresh membership
// whether the change is already in.
func (h *Host) change(ctx context.Context, shard uint64, done func(*dragonboat.Membership) bool,
	req func(ctx context.Context, ccid uint64) error) error {
	for {
		m, err := h.membership(ctx, shard)
		if err != nil {
			return err
		}
		if done(m) {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = req(cctx, m.ConfigChangeID)
		cancel()
		if err == nil {
			continue // re-read: done reports it in
		}
		if !dragonboat.IsTempError(err) && !errors.Is(err, dragonboat.ErrRejected) {
			return err
		}
		h.log.Debug("config change not made: retrying", zap.Uint64("shard_id", shard), zap.Uint64("config_change_id", m.ConfigChangeID), zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d config change: %w (last error %w)", shard, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AddLearner adds replica on raftAddr to shard as a non-voting member.
func (h *Host) AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error {
	return h.change(ctx, shard, func(m *dragonboat.Membership) bool {
		_, voter := m.Nodes[replica]
		_, learner := m.NonVotings[replica]
		return voter || learner
	}, func(ctx context.Context, ccid uint64) error {
		return h.nh.SyncRequestAddNonVoting(ctx, shard, replica, raftAddr, ccid)
	})
}

// Promote turns the non-voting replica of shard into a voter.
func (h *Host) Promote(ctx context.Context, shard, replica uint64, raftAddr string) error {
	return h.change(ctx, shard, func(m *dragonboat.Membership) bool {
		_, voter := m.Nodes[replica]
		return voter
	}, func(ctx context.Context, ccid uint64) error {
		return h.nh.SyncRequestAddReplica(ctx, shard, replica, raftAddr, ccid)
	})
}

// RemoveReplica deletes replica from shard's membership (voter or not).
// When replica is this node's own and Dragonboat has stopped it once the
// removal applied, the shard is not found here: that is the removal done.
// Until it stops, the removed replica's membership reads are dropped as
// not ready, so the removal may not confirm here at all: the executor
// removes its own node's replica through a peer (broker/moves.go).
func (h *Host) RemoveReplica(ctx context.Context, shard, replica uint64) error {
	h.mu.RLock()
	own := h.shards[shard] != nil && h.shards[shard].replicaID == replica
	h.mu.RUnlock()
	err := h.removeReplica(ctx, shard, replica)
	if own && errors.Is(err, dragonboat.ErrShardNotFound) {
		return nil
	}
	return err
}

func (h *Host) removeReplica(ctx context.Context, shard, replica uint64) error {
	return h.change(ctx, shard, func(m *dragonboat.Membership) bool {
		_, voter := m.Nodes[replica]
		_, learner := m.NonVotings[replica]
		return !voter && !learner
	}, func(ctx context.Context, ccid uint64) error {
		return h.nh.SyncRequestDeleteReplica(ctx, shard, replica, ccid)
	})
}

// ShardLeader is the node leading shard as this node sees it, 0 when not
// known or not hosted here.
func (h *Host) ShardLeader(shard uint64) uint64 {
	_, node, _, ok := h.LeaderInfo(shard)
	if !ok {
		return 0
	}
	return node
}

// startJoining starts r, a replica added to a running shard, with
// join=true and no initial members: it catches up from the leader. On its
// first start nothing of an earlier replica of the shard may be left on
// this node (one a rolled-back move placed here): its Raft data is removed
// and the shard's key range deleted, so r's state machine opens empty
// (Open answers the applied index of the keys it finds) and takes the
// leader's snapshot.
func (h *Host) startJoining(ctx context.Context, sh *meta.Shard, r meta.Replica) error {
	id := uint64(sh.ID)
	join := !h.nh.HasNodeInfo(id, uint64(r.ID))
	if join {
		for _, ni := range h.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{}).LogInfo {
			if ni.ShardID != id || ni.ReplicaID == uint64(r.ID) {
				continue
			}
			h.log.Warn("removing the data of an earlier replica before a replica joins", zap.Uint64("shard_id", id),
				zap.Uint64("replica_id", ni.ReplicaID), zap.Uint64("placed_replica_id", uint64(r.ID)))
			if err := h.removeData(ctx, id, ni.ReplicaID); err != nil {
				return fmt.Errorf("remove earlier replica %d: %w", ni.ReplicaID, err)
			}
		}
		if err := h.db.DeleteRange(keys.ShardPrefix(id), keys.ShardEnd(id), pebble.Sync); err != nil {
			return fmt.Errorf("delete key range before a join: %w", err)
		}
	}
	return h.startReplica(ctx, sh, r, nil, join)
}

// dropReplica stops s, a replica running here, removes its Raft data and
// its shard's key range, and forgets it; on an error s stays, to be
// dropped again.
func (h *Host) dropReplica(ctx context.Context, id uint64, s *shard) error {
	if err := h.removeData(ctx, id, s.replicaID); err != nil {
		return err
	}
	h.mu.Lock()
	if h.shards[id] == s {
		delete(h.shards, id)
	}
	h.mu.Unlock()
	if s.dispatcher != nil {
		s.dispatcher.Stop()
	}
	s.proposer.Close()
	h.notifyChanged()
	return nil
}

// dropUnplaced stops the replicas running here that the meta state no
// longer places on this node, removes their Raft data and deletes their
// key range from the state DB; it does the same for the replicas on disk
// here that never started since this node's start (dropStale); then it
// reports the delete-data step of the operation that removed the replica,
// if one waits for it.
func (h *Host) dropUnplaced(ctx context.Context, st *meta.State) {
	self := meta.NodeID(h.cfg.NodeID)
	for _, id := range h.HostedShards() {
		sh, ok := st.Shards[meta.EventShardID(id)]
		if ok {
			if _, placed := sh.ReplicaOn(self); placed {
				continue
			}
		}
		h.mu.Lock()
		s := h.shards[id]
		delete(h.shards, id)
		h.mu.Unlock()
		if s.dispatcher != nil {
			s.dispatcher.Stop()
		}
		s.proposer.Close()
		if err := h.removeData(ctx, id, s.replicaID); err != nil {
			h.log.Error("remove data of a replica no longer placed here", zap.Uint64("shard_id", id), zap.Uint64("replica_id", s.replicaID), zap.Error(err))
			continue
		}
		h.log.Info("shard replica removed from this node", zap.Uint64("shard_id", id), zap.Uint64("replica_id", s.replicaID))
		h.notifyChanged()
	}
	h.dropStale(ctx, st)
	h.reportSteps(ctx, st)
}

// dropStale removes the Raft data and key range of the replicas on this
// node's disk that do not run and that st shows were taken off this node
// for good (staleReplicas): a replica removed while the node was down,
// whose removal the node's first meta state at start-up already held, so
// it never started (dropUnplaced's loop over running replicas never sees
// it). This is the clean-up a skipped delete-data step leaves to the node.
func (h *Host) dropStale(ctx context.Context, st *meta.State) {
	running := map[uint64]bool{}
	for _, id := range h.HostedShards() {
		running[id] = true
	}
	for _, ni := range staleReplicas(st, meta.NodeID(h.cfg.NodeID), h.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{}).LogInfo, running) {
		if err := h.removeData(ctx, ni.ShardID, ni.ReplicaID); err != nil {
			h.log.Error("remove data of a replica no longer placed here", zap.Uint64("shard_id", ni.ShardID), zap.Uint64("replica_id", ni.ReplicaID), zap.Error(err))
			continue
		}
		h.log.Info("data of a replica no longer placed here removed", zap.Uint64("shard_id", ni.ShardID), zap.Uint64("replica_id", ni.ReplicaID))
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
func (h *Host) removeData(ctx context.Context, shard, replica uint64) error {
	if err := h.nh.StopReplica(shard, replica); err != nil && !errors.Is(err, dragonboat.ErrShardNotFound) {
		return fmt.Errorf("stop replica: %w", err)
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := h.nh.SyncRemoveData(cctx, shard, replica)
		cancel()
		if err == nil {
			break
		}
		if !dragonboat.IsTempError(err) && !errors.Is(err, dragonboat.ErrShardNotStopped) || ctx.Err() != nil {
			return fmt.Errorf("remove raft data: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := h.db.DeleteRange(keys.ShardPrefix(shard), keys.ShardEnd(shard), pebble.Sync); err != nil {
		return fmt.Errorf("delete key range: %w", err)
	}
	return nil
}

// reportSteps completes the steps the executor waits for this node to do:
// wait-catch-up for a joining replica here that has caught up (a read
// index served by it), delete-data for a replica removed from here.
func (h *Host) reportSteps(ctx context.Context, st *meta.State) {
	self := meta.NodeID(h.cfg.NodeID)
	for _, op := range st.Unfinished() {
		if op.Current >= len(op.Steps) || op.Steps[op.Current].Node != self {
			continue
		}
		switch op.Steps[op.Current].Kind {
		case meta.StepWaitCatchUp:
			if !h.caughtUp(uint64(op.Shard)) {
				continue
			}
		case meta.StepDeleteData:
			if h.hosts(uint64(op.Shard)) {
				continue
			}
		default:
			continue
		}
		h.proposeMeta(ctx, &meta.Command{Op: meta.OpAdvanceOperation, OperationID: op.ID, Step: op.Current})
		h.log.Info("operation step done here", zap.Uint64("shard_id", uint64(op.Shard)), zap.Uint64("operation_id", uint64(op.ID)),
			zap.String("step", string(op.Steps[op.Current].Kind)))
	}
}

// HostsShard reports whether a replica of shard runs on this node.
func (h *Host) HostsShard(shard uint64) bool { return h.hosts(shard) }

func (h *Host) hosts(shard uint64) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	_, ok := h.shards[shard]
	return ok
}

// caughtUp reports whether shard's local replica serves a read index: it
// has then applied everything the leader had committed when asked.
func (h *Host) caughtUp(shard uint64) bool {
	if !h.hosts(shard) {
		return false
	}
	rs, err := h.nh.ReadIndex(shard, 2*time.Second)
	if err != nil {
		return false
	}
	defer rs.Release()
	r := <-rs.ResultC()
	return r.Completed()
}
