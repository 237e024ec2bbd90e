package service

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/meta/rebalance"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// DrainNode marks a node draining and submits the plan that moves its
// replicas and leaderships off (rebalance.Plan plans drain moves off
// draining nodes, around the operations already unfinished: a shard busy
// with another operation is planned by a later call). It is idempotent:
// calling it again until nothing remains carries the drain on. Served on
// the meta leader; any other broker forwards it (see toMetaLeader). The
// plan moves nothing onto the nodes the meta leader's healer has not heard
// from lately (suspect, see operator.Healer.Suspects): a drain whose only
// targets are suspect waits for a later call.
func (c *Cluster) DrainNode(ctx context.Context, req *sundialv1.DrainNodeRequest) (*sundialv1.DrainNodeResponse, error) {
	if bad := validate.DrainNode(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if resp, forwarded, err := toMetaLeader(ctx, c.meta, c.opts.Peers, sundialv1.NewClusterClient, sundialv1.ClusterClient.DrainNode, req); forwarded {
		return resp, err
	}
	id := meta.NodeID(req.GetNodeId())
	code, _, err := c.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpSetNodeState, NodeID: id, NodeState: meta.NodeDraining})
	if err != nil {
		return nil, err
	}
	st, err := c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	switch code {
	case meta.ResultOK, meta.ResultNoop:
	case meta.ResultNotFound:
		return nil, unknownNode(id)
	default:
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id",
			Description: fmt.Sprintf("node %d is %s and cannot be drained", id, st.Nodes[id].State)})
	}
	if code == meta.ResultOK {
		c.log.Info("node draining", zap.Uint64("node_id", uint64(id)))
	}
	resp := &sundialv1.DrainNodeResponse{}
	if h := st.HoldingsOf(id); len(h.Shards) > 0 {
		suspects := c.unavailable()
		plan := rebalance.Plan(st, c.leaders(), rebalance.Options{Timeouts: c.opts.StepTimeouts, Unavailable: suspects})
		if len(suspects) > 0 {
			c.log.Info("drain planned around suspect nodes (not heard from lately): nothing moves onto them",
				zap.Uint64("node_id", uint64(id)), zap.Int("operations", len(plan)), operator.SuspectsField(suspects))
		}
		if len(plan) > 0 {
			code, data, err := c.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpSubmitOperations, Operations: plan})
			if err != nil {
				return nil, err
			}
			if st, err = c.meta.ReadMeta(ctx); err != nil {
				return nil, err
			}
			stored := storedIDs(code, data)
			if len(stored) > 0 {
				c.log.Info("drain operations submitted", zap.Uint64("node_id", uint64(id)), zap.Int("operations", len(stored)))
			}
			for _, opID := range stored {
				if op := st.Operations[opID]; op != nil {
					resp.Operations = append(resp.Operations, operationProto(op))
				}
			}
		}
	}
	h := st.HoldingsOf(id)
	resp.Node = nodeProto(st.Nodes[id])
	resp.RemainingReplicas = uint32(len(h.Shards))     //nolint:gosec // shard counts are small
	resp.PendingOperations = uint32(len(h.Operations)) //nolint:gosec // operation counts are small
	resp.RemainingLeaders = uint32(c.leadsCount(id))   //nolint:gosec // shard counts are small
	return resp, nil
}

// RemoveNode removes a node for good (see the RPC's contract in
// sundial.proto). On the meta leader it checks, in order: the node is
// known; with force, that it is dead or does not answer; without force,
// that it is drained (the meta state machine checks holdings again when
// it applies the removal, so no move can land in between); that removing
// its meta vote keeps the group safe, promoting a non-voting member to
// voter first when one can replace it. It then records the removal and
// deletes the node's meta replica. A retried call on a removed node only
// finishes the meta membership change.
func (c *Cluster) RemoveNode(ctx context.Context, req *sundialv1.RemoveNodeRequest) (*sundialv1.RemoveNodeResponse, error) {
	if bad := validate.RemoveNode(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if resp, forwarded, err := toMetaLeader(ctx, c.meta, c.opts.Peers, sundialv1.NewClusterClient, sundialv1.ClusterClient.RemoveNode, req); forwarded {
		return resp, err
	}
	forward := func(addr string) (*sundialv1.RemoveNodeResponse, error) {
		return forwardTo(ctx, c.opts.Peers, addr, sundialv1.NewClusterClient, sundialv1.ClusterClient.RemoveNode, req)
	}
	id, force := meta.NodeID(req.GetNodeId()), req.GetForce()
	st, err := c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	n := st.Nodes[id]
	if n == nil {
		return nil, unknownNode(id)
	}
	resp := &sundialv1.RemoveNodeResponse{}
	if n.State != meta.NodeRemoved {
		if err := c.removable(ctx, st, n, force); err != nil {
			return nil, err
		}
		voters, nonVoting, err := c.meta.MetaMembers(ctx)
		if err != nil {
			return nil, err
		}
		if uint64(id) == c.meta.NodeID() {
			// This broker leads the meta group and is to leave it: it
			// would stop its meta replica once it applies its removal.
			// Hand the lead to another voter, which removes this node.
			addr, err := c.handOffMeta(ctx, st, voters, id)
			if err != nil {
				return nil, err
			}
			return forward(addr)
		}
		if _, voter := voters[uint64(id)]; voter {
			promoted, err := c.voters.Replace(ctx, st, id, voters, nonVoting, force)
			if err != nil {
				return nil, err
			}
			resp.PromotedMetaVoter = promoted
		}
		code, _, err := c.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpSetNodeState, NodeID: id, NodeState: meta.NodeRemoved, Force: force})
		if err != nil {
			return nil, err
		}
		if st, err = c.meta.ReadMeta(ctx); err != nil {
			return nil, err
		}
		switch code {
		case meta.ResultOK, meta.ResultNoop:
		case meta.ResultHoldsReplicas:
			return nil, holdsError(st, id, c.leadsCount(id), force)
		default:
			return nil, notDrainedError(id, st.Nodes[id].State)
		}
		if code == meta.ResultOK {
			c.log.Info("node removed", zap.Uint64("node_id", uint64(id)), zap.Bool("force", force),
				zap.Uint64("promoted_meta_voter", resp.PromotedMetaVoter))
		}
	}
	voters, nonVoting, err := c.meta.MetaMembers(ctx)
	if err != nil {
		return nil, err
	}
	_, voter := voters[uint64(id)]
	_, other := nonVoting[uint64(id)]
	if uint64(id) == c.meta.NodeID() {
		addr, err := c.handOffMeta(ctx, st, voters, id)
		if err != nil {
			return nil, err
		}
		return forward(addr)
	}
	if voter || other {
		if err := c.moves.RemoveReplica(ctx, meta.ShardID, uint64(id)); err != nil {
			return nil, fmt.Errorf("delete node %d's meta replica: %w", id, err)
		}
		resp.LeftMetaGroup = true
		c.log.Info("node left the meta group", zap.Uint64("node_id", uint64(id)), zap.Bool("was_voter", voter))
	}
	if st, err = c.meta.ReadMeta(ctx); err != nil {
		return nil, err
	}
	resp.Node = nodeProto(st.Nodes[id])
	return resp, nil
}

// removable checks that n may be removed now: a forced removal is for a
// node that is dead or does not answer; else the node must be drained
// (draining or dead, holding nothing).
func (c *Cluster) removable(ctx context.Context, st *meta.State, n *meta.Node, force bool) error {
	if force {
		if n.State != meta.NodeDead && c.voters.Live(ctx, n) {
			return forceLiveRefusal(st, n)
		}
		if h := st.HoldingsOf(n.ID); len(h.LastHolder) > 0 {
			return holdsError(st, n.ID, 0, true)
		}
		return nil
	}
	if n.State != meta.NodeDraining && n.State != meta.NodeDead {
		return notDrainedError(n.ID, n.State)
	}
	if h := st.HoldingsOf(n.ID); !h.Empty() {
		return holdsError(st, n.ID, c.leadsCount(n.ID), false)
	}
	return nil
}

// forceLiveRefusal refuses a forced removal of n, which answers, saying
// what to run instead: remove-node without --force when n is drained
// already, else a drain first.
func forceLiveRefusal(st *meta.State, n *meta.Node) error {
	next := fmt.Sprintf("run shardctl drain-node %d, then shardctl remove-node %d", n.ID, n.ID)
	if n.State == meta.NodeDraining && st.HoldingsOf(n.ID).Empty() {
		next = fmt.Sprintf("node %d is drained: run shardctl remove-node %d without --force", n.ID, n.ID)
	}
	return apierr.FailedPrecondition(apierr.FieldViolation{Field: "force", Description: fmt.Sprintf(
		"node %d at %s answers: --force is only for a dead or unreachable node; %s", n.ID, n.GRPCAddr, next)})
}

// handOffMeta moves the meta group's leadership from this node (id,
// leaving the group) to another voter and answers the new leader's gRPC
// address once it leads.
func (c *Cluster) handOffMeta(ctx context.Context, st *meta.State, voters map[uint64]string, id meta.NodeID) (string, error) {
	var to uint64
	for _, v := range slices.Sorted(maps.Keys(voters)) {
		if n := st.Nodes[meta.NodeID(v)]; v != uint64(id) && n != nil && n.State == meta.NodeActive && c.voters.Live(ctx, n) {
			to = v
			break
		}
	}
	if to == 0 {
		return "", status.Errorf(codes.FailedPrecondition, "node %d leads the meta group and no other active voter can take over", id)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var asked time.Time
	for {
		if leader := c.meta.MetaLeader(); leader != 0 && leader != uint64(id) {
			if n := st.Nodes[meta.NodeID(leader)]; n != nil {
				return n.GRPCAddr, nil
			}
		}
		if c.meta.MetaLeader() == uint64(id) && time.Since(asked) > 5*time.Second {
			asked = time.Now()
			c.log.Info("meta leadership handed off before removal", zap.Uint64("node_id", uint64(id)), zap.Uint64("to_node_id", to))
			if err := c.meta.TransferMetaLeader(to); err != nil {
				return "", fmt.Errorf("hand the meta group's leadership to node %d: %w", to, err)
			}
		}
		select {
		case <-ctx.Done():
			return "", status.Errorf(codes.Unavailable, "node %d leads the meta group and did not hand its leadership to node %d in time; retry", id, to)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaders maps each shard to its leader's node as this broker knows it.
func (c *Cluster) leaders() map[meta.EventShardID]meta.NodeID {
	out := map[meta.EventShardID]meta.NodeID{}
	for id, n := range c.replicas.ShardLeaders() {
		if n != 0 {
			out[meta.EventShardID(id)] = meta.NodeID(n)
		}
	}
	return out
}

// leadsCount is the number of shards node id leads, as this broker knows.
func (c *Cluster) leadsCount(id meta.NodeID) int {
	n := 0
	for _, l := range c.replicas.ShardLeaders() {
		if l == uint64(id) {
			n++
		}
	}
	return n
}

func unknownNode(id meta.NodeID) error {
	return status.Errorf(codes.NotFound, "node %d is not a member of the cluster", id)
}

func notDrainedError(id meta.NodeID, state meta.NodeState) error {
	if state == meta.NodeRemoved {
		return apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id", Description: fmt.Sprintf("node %d is removed", id)})
	}
	return apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id", Description: fmt.Sprintf(
		"node %d is %s, not drained: run shardctl drain-node %d first "+
			"(a broker that is down for good, e.g. its disk died: shardctl remove-node --force %d)", id, state, id, id)})
}

// holdsError says what still lives on node id: the replicas (with their
// shards), the leaderships, the unfinished operations, and with force the
// shards it is the last live holder of.
func holdsError(st *meta.State, id meta.NodeID, leads int, force bool) error {
	h := st.HoldingsOf(id)
	var desc string
	switch {
	case force || len(h.LastHolder) > 0 && len(h.LastHolder) == len(h.Shards):
		desc = fmt.Sprintf("node %d holds the last live replica of %s (shards %s): removing it would lose them; "+
			"bring back a node holding them or restore them first", id, plural(len(h.LastHolder), "shard"), shardList(h.LastHolder))
	case len(h.Shards) > 0:
		desc = fmt.Sprintf("node %d still holds %s (shards %s)", id, plural(len(h.Shards), "replica"), shardList(h.Shards))
		if leads > 0 {
			desc += fmt.Sprintf(" and leads %s", plural(leads, "shard"))
		}
		desc += fmt.Sprintf(": run shardctl drain-node %d first", id)
	default:
		ids := make([]string, len(h.Operations))
		for i, op := range h.Operations {
			ids[i] = fmt.Sprint(op)
		}
		desc = fmt.Sprintf("node %d is named by %s still unfinished (%s): wait for them (shardctl operations), then remove it",
			id, plural(len(h.Operations), "operation"), strings.Join(ids, ", "))
	}
	return apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id", Description: desc})
}

func shardList(ids []meta.EventShardID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func nodeProto(n *meta.Node) *sundialv1.Node {
	if n == nil {
		return nil
	}
	return &sundialv1.Node{NodeId: uint64(n.ID), GrpcAddr: n.GRPCAddr, RaftAddr: n.RaftAddr, State: nodeState(n.State), MetaVoter: n.MetaVoter}
}

// storedIDs decodes submit_operations' answer: the ids it stored.
func storedIDs(code uint64, data []byte) []meta.OperationID {
	var ids []meta.OperationID
	if code == meta.ResultOK {
		_ = json.Unmarshal(data, &ids) // the state machine's own encoding
	}
	return ids
}
