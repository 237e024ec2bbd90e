package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Admin operations (meta/adminop.go: delete-topic, create-group,
// delete-group, seed-groups) run like moves, one step per shard, but their steps are
// done on the shard's leader, wherever it runs: a Shard.Group call over
// gRPC to the leader's grpc_addr. The leader is looked up where the meta
// leader knows it (its own replicas, then leader gossip) and else asked of
// the shard's replicas in turn, following a NotLeader answer's address.
// Every call is bounded (adminCallTimeout) so a paused broker costs one
// timeout, not the step. Admin steps are idempotent and roll forward.
//
// Admin operations run in their own loop (adminLoop), capped by
// Config.MaxRunning apart from the moves, so a topic change stuck on an
// unreachable shard never takes a move's slot, nor a move a topic's.

// adminCallTimeout bounds one Shard.Group call to one broker.
const adminCallTimeout = 5 * time.Second

// leaderView is the host's view of every shard's leader, gossip included
// (host.Replicas.ShardLeaders); the executor uses it when the host has it.
type leaderView interface {
	ShardLeaders() map[uint64]uint64
}

// adminRuns is the admin loop's state.
type adminRuns struct {
	mu      sync.Mutex
	running map[meta.OperationID]*runner // guarded by mu
}

// adminLoop starts the unfinished admin operations while this node leads
// meta and cancels them when it no longer does.
func (e *Executor) adminLoop(ctx context.Context) {
	defer e.wg.Done()
	a := &e.adminOps
	a.mu.Lock()
	a.running = map[meta.OperationID]*runner{}
	a.mu.Unlock()
	t := time.NewTicker(e.cfg.Poll)
	defer t.Stop()
	for {
		e.adminTick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Executor) adminTick(ctx context.Context) {
	a := &e.adminOps
	if e.host.MetaLeader() != e.self {
		a.mu.Lock()
		for id, r := range a.running {
			r.cancel()
			delete(a.running, id)
		}
		a.mu.Unlock()
		return
	}
	st, err := e.host.ReadMeta(ctx)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, op := range st.Unfinished() {
		if !op.Kind.Admin() {
			continue
		}
		if len(a.running) >= e.cfg.MaxRunning {
			return
		}
		if _, ok := a.running[op.ID]; ok {
			continue
		}
		octx, cancel := context.WithCancel(ctx)
		r := &runner{cancel: cancel}
		a.running[op.ID] = r
		e.wg.Add(1)
		go func(id meta.OperationID) {
			defer e.wg.Done()
			defer cancel()
			e.run(octx, r, id)
			a.mu.Lock()
			if a.running[id] == r { // not a runner started after a lost and regained leadership
				delete(a.running, id)
			}
			a.mu.Unlock()
		}(op.ID)
	}
}

// adminStep does one admin step on its shard's leader and records it done.
func (e *Executor) adminStep(ctx context.Context, st *meta.State, op *meta.Operation, step meta.Step) error {
	shard := uint64(step.Shard)
	var reqs []*brokerv1.ShardGroupRequest
	switch step.Kind {
	case meta.StepRegisterGroup:
		group := op.Group
		if step.Group != "" { // a seed-groups step names its own group
			group = step.Group
		}
		reqs = append(reqs, &brokerv1.ShardGroupRequest{ShardId: shard, Topic: op.Topic, Group: group})
	case meta.StepForgetGroup:
		reqs = append(reqs, &brokerv1.ShardGroupRequest{ShardId: shard, Topic: op.Topic, Group: op.Group, Delete: true})
	case meta.StepForgetTopic:
		reqs = append(reqs, &brokerv1.ShardGroupRequest{ShardId: shard, Topic: op.Topic, Delete: true})
		if !validate.IsDeadLetter(op.Topic) {
			reqs = append(reqs, &brokerv1.ShardGroupRequest{ShardId: shard, Topic: op.Topic + validate.DeadLetterSuffix, Delete: true})
		}
	default:
		return fmt.Errorf("operator: %s is not an admin step", step.Kind)
	}
	if _, ok := st.Shards[step.Shard]; !ok {
		// The shard is gone from the cluster: nothing of the topic is left
		// on it.
		return e.advance(ctx, op.ID, op.Current)
	}
	for _, req := range reqs {
		if err := OnShardLeader(ctx, e.host, e.peers, e.log, st, shard, adminCallTimeout, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := brokerv1.NewShardClient(conn).Group(ctx, req)
			return err
		}); err != nil {
			return err
		}
	}
	return e.advance(ctx, op.ID, op.Current)
}

// errNoLeaderFound fails an admin step no broker led the shard for.
var errNoLeaderFound = errors.New("operator: no broker answered as the shard's leader")

// LeaderKnower knows shard leaders: the node leading shard, 0 if not known
// (host.Replicas). One that also has a leaderView is asked that too.
type LeaderKnower interface {
	ShardLeader(shard uint64) uint64
}

// OnShardLeader runs call against shard's leader: the one h knows first,
// then each node holding a replica, each given timeout; a NotLeader answer
// naming the leader's address is followed at once.
func OnShardLeader(ctx context.Context, h LeaderKnower, peers *peer.Conns, log *zap.Logger, st *meta.State, shard uint64, timeout time.Duration,
	call func(context.Context, *grpc.ClientConn) error) error {
	var addrs []string
	seen := map[string]bool{}
	add := func(node uint64) {
		if n := st.Nodes[meta.NodeID(node)]; n != nil && n.GRPCAddr != "" && !seen[n.GRPCAddr] {
			seen[n.GRPCAddr] = true
			addrs = append(addrs, n.GRPCAddr)
		}
	}
	if l := h.ShardLeader(shard); l != 0 {
		add(l)
	} else if lv, ok := h.(leaderView); ok {
		add(lv.ShardLeaders()[shard])
	}
	if sh := st.Shards[meta.EventShardID(shard)]; sh != nil {
		for _, r := range sh.Replicas {
			add(uint64(r.Node))
		}
	}
	last := errNoLeaderFound
	for i := 0; i < len(addrs) && ctx.Err() == nil; i++ {
		conn, err := peers.Conn(addrs[i])
		if err != nil {
			last = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err = call(cctx, conn)
		cancel()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("shard %d at %s: %w", shard, addrs[i], err)
		if nl, ok := apierr.AsNotLeader(err); ok && nl.GetLeaderAddr() != "" && !seen[nl.GetLeaderAddr()] {
			seen[nl.GetLeaderAddr()] = true
			addrs = append(addrs[:i+1], append([]string{nl.GetLeaderAddr()}, addrs[i+1:]...)...)
		}
		log.Debug("shard leader call failed", zap.Uint64("shard_id", shard), zap.String("addr", addrs[i]), zap.Error(err))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
	}
	return last
}
