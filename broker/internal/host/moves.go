package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/meta"
)

// Moves makes the membership and leadership changes of a replica move
// (DESIGN.md §6) on this node's replicas; package operator decides them
// (its RoutedHost, the healer, the meta-voter policy). Each membership
// change is idempotent, so an executor that resumes an operation after a
// meta-leader change may run a step again: a replica already added (or
// already gone) is success. Each needs a replica of the shard on this
// node, through which Dragonboat proposes the change to the shard's
// leader. Safe for concurrent use; it blocks the calling goroutine only.
type Moves struct {
	nh       *dragonboat.NodeHost
	log      *zap.Logger
	replicas *Replicas
	meta     *MetaClient
}

// membership reads shard's membership linearizably, retrying temporary
// errors (ErrShardNotReady after a config change) until ctx ends.
func membership(ctx context.Context, nh *dragonboat.NodeHost, log *zap.Logger, shard uint64) (*dragonboat.Membership, error) {
	for {
		m, err := withRetry(ctx, log, func(ctx context.Context) (*dragonboat.Membership, error) {
			return nh.SyncGetShardMembership(ctx, shard)
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
func withRetry(ctx context.Context, log *zap.Logger, f func(context.Context) (*dragonboat.Membership, error)) (*dragonboat.Membership, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		m, err := f(cctx)
		cancel()
		if err == nil || !dragonboat.IsTempError(err) || ctx.Err() != nil {
			return m, err
		}
		log.Debug("membership read failed: retrying", zap.Error(err))
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
func (mv *Moves) change(ctx context.Context, shard uint64, done func(*dragonboat.Membership) bool,
	req func(ctx context.Context, ccid uint64) error) error {
	for {
		m, err := membership(ctx, mv.nh, mv.log, shard)
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
		mv.log.Debug("config change not made: retrying", zap.Uint64("shard_id", shard), zap.Uint64("config_change_id", m.ConfigChangeID), zap.Error(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d config change: %w (last error %w)", shard, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AddLearner adds replica on raftAddr to shard as a non-voting member.
func (mv *Moves) AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error {
	return mv.change(ctx, shard, func(m *dragonboat.Membership) bool {
		_, voter := m.Nodes[replica]
		_, learner := m.NonVotings[replica]
		return voter || learner
	}, func(ctx context.Context, ccid uint64) error {
		return mv.nh.SyncRequestAddNonVoting(ctx, shard, replica, raftAddr, ccid)
	})
}

// Promote turns the non-voting replica of shard into a voter.
func (mv *Moves) Promote(ctx context.Context, shard, replica uint64, raftAddr string) error {
	return mv.change(ctx, shard, func(m *dragonboat.Membership) bool {
		_, voter := m.Nodes[replica]
		return voter
	}, func(ctx context.Context, ccid uint64) error {
		return mv.nh.SyncRequestAddReplica(ctx, shard, replica, raftAddr, ccid)
	})
}

// RemoveReplica deletes replica from shard's membership (voter or not).
// When replica is this node's own and Dragonboat has stopped it once the
// removal applied, the shard is not found here: that is the removal done.
// Until it stops, the removed replica's membership reads are dropped as
// not ready, so the removal may not confirm here at all: the executor
// removes its own node's replica through a peer (operator.RoutedHost).
func (mv *Moves) RemoveReplica(ctx context.Context, shard, replica uint64) error {
	s := mv.replicas.get(shard)
	own := s != nil && s.replicaID == replica
	err := mv.removeReplica(ctx, shard, replica)
	if own && errors.Is(err, dragonboat.ErrShardNotFound) {
		return nil
	}
	return err
}

func (mv *Moves) removeReplica(ctx context.Context, shard, replica uint64) error {
	return mv.change(ctx, shard, func(m *dragonboat.Membership) bool {
		_, voter := m.Nodes[replica]
		_, learner := m.NonVotings[replica]
		return !voter && !learner
	}, func(ctx context.Context, ccid uint64) error {
		return mv.nh.SyncRequestDeleteReplica(ctx, shard, replica, ccid)
	})
}

// ErrNoReplicaOnNode is answered to a leadership transfer to a node that
// holds no replica of the shard.
var ErrNoReplicaOnNode = errors.New("host: no replica of the shard on the node")

// NotShardLeaderError answers a leadership transfer asked of a node whose
// replica does not lead the shard: Leader and LeaderAddr (its gRPC
// address) name the node that does, 0 and empty when unknown.
type NotShardLeaderError struct {
	Shard      uint64
	Leader     uint64
	LeaderAddr string
}

func (e *NotShardLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("host: shard %d: leader unknown", e.Shard)
	}
	return fmt.Sprintf("host: shard %d led by node %d at %s", e.Shard, e.Leader, e.LeaderAddr)
}

// NotShardLeader marks the error for callers that match it by behaviour
// (errors.As with an interface, as the executor's RoutedHost does, which
// cannot import this package): always true.
func (e *NotShardLeaderError) NotShardLeader() bool { return true }

// endLeaseTimeout bounds the wait for lease proposals in flight before a
// leadership transfer; the dispatcher gives each 10s.
const endLeaseTimeout = 15 * time.Second

// TransferLeadership asks Dragonboat to move shard id's leadership to the
// replica on node toNode; it returns once the request is queued. Only the
// leader's own host starts a transfer, so the leader's dispatcher gives up
// its leader lease first, and waits for the leases whose deliveries it
// pushed before their commit: nothing pushed is left behind a lease the
// transfer may drop. A follower asked answers a *NotShardLeaderError
// naming the leader: Dragonboat would forward the request to the leader,
// whose lease would then outlive its leadership while the target, elected
// at once, already answers cancels.
func (mv *Moves) TransferLeadership(ctx context.Context, id, toNode uint64) error {
	sh, ok := mv.meta.Meta().Shards[meta.EventShardID(id)]
	if !ok {
		return fmt.Errorf("%w: shard %d", ErrNoReplicaOnNode, id)
	}
	r, ok := sh.ReplicaOn(meta.NodeID(toNode))
	if !ok {
		return fmt.Errorf("%w: shard %d, node %d", ErrNoReplicaOnNode, id, toNode)
	}
	mv.replicas.mu.RLock()
	var d *dispatch.Dispatcher
	var replica uint64
	if s := mv.replicas.shards[id]; s != nil {
		d, replica = s.dispatcher, s.replicaID
	}
	mv.replicas.mu.RUnlock()
	// The dispatcher says this host took the leadership; Dragonboat may
	// have seen it go since (the host loop drops the dispatcher next).
	if leader, _, valid, err := mv.nh.GetLeaderID(id); d == nil || err != nil || !valid || leader != replica {
		e := &NotShardLeaderError{Shard: id}
		if err == nil && valid && leader != replica {
			e.Leader, e.LeaderAddr = mv.replicas.nodeOfReplica(id, leader)
		}
		return e
	}
	ctx, cancel := context.WithTimeout(ctx, endLeaseTimeout)
	defer cancel()
	if err := d.EndLease(ctx); errors.Is(err, dispatch.ErrStopped) {
		return &NotShardLeaderError{Shard: id}
	} else if err != nil {
		return fmt.Errorf("shard %d: deliveries pushed ahead of their lease are still unanswered: %w", id, err)
	}
	mv.log.Info("shard leadership transfer requested", zap.Uint64("shard_id", id), zap.Uint64("to_node_id", toNode), zap.Uint64("to_replica_id", uint64(r.ID)))
	return mv.nh.RequestLeaderTransfer(id, uint64(r.ID))
}
