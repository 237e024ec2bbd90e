package service

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

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

// Rebalance plans over the meta state read linearizably and the shard
// leaders this broker knows. While moves are unfinished (admin operations
// on topics do not count) it answers
// them (running) and plans nothing; a dry run answers the plan; else the
// plan is submitted to the meta group and the operations it stored are
// answered with their ids. Served on the meta leader, whose executor runs
// the operations and whose healer knows which nodes have not answered
// lately: the plan (a dry run's too) moves nothing onto or off those
// suspect nodes. Any other broker forwards it (see toMetaLeader), so a dry
// run answers what a rebalance would submit.
func (c *Cluster) Rebalance(ctx context.Context, req *sundialv1.RebalanceRequest) (*sundialv1.RebalanceResponse, error) {
	if bad := validate.Rebalance(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if resp, forwarded, err := toMetaLeader(ctx, c.meta, c.opts.Peers, sundialv1.NewClusterClient, sundialv1.ClusterClient.Rebalance, req); forwarded {
		return resp, err
	}
	st, err := c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	if running := st.UnfinishedMoves(); len(running) > 0 {
		return &sundialv1.RebalanceResponse{Operations: operationsProto(running), Running: true}, nil
	}
	leaders := map[meta.EventShardID]meta.NodeID{}
	for id, n := range c.replicas.ShardLeaders() {
		if n != 0 {
			leaders[meta.EventShardID(id)] = meta.NodeID(n)
		}
	}
	suspects := c.unavailable()
	plan := rebalance.Plan(st, leaders, rebalance.Options{MaxOperations: int(req.GetMaxOperations()), Timeouts: c.opts.StepTimeouts, Unavailable: suspects})
	if len(suspects) > 0 {
		c.log.Info("rebalance planned around suspect nodes (not heard from lately): nothing moves onto or off them",
			zap.Bool("dry_run", req.GetDryRun()), zap.Int("operations", len(plan)), operator.SuspectsField(suspects))
	}
	skipped := slices.Sorted(maps.Keys(suspects))
	if req.GetDryRun() || len(plan) == 0 {
		return &sundialv1.RebalanceResponse{Operations: operationsProto(plan), SuspectNodeIds: nodeIDs(skipped)}, nil
	}
	code, data, err := c.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpSubmitOperations, Operations: plan})
	if err != nil {
		return nil, err
	}
	var ids []meta.OperationID
	if code == meta.ResultOK {
		if err := json.Unmarshal(data, &ids); err != nil {
			return nil, status.Errorf(codes.Internal, "submit operations: %v", err)
		}
	}
	st, err = c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.RebalanceResponse{SuspectNodeIds: nodeIDs(skipped)}
	for _, id := range ids {
		if op := st.Operations[id]; op != nil {
			resp.Operations = append(resp.Operations, operationProto(op))
		}
	}
	if len(ids) == 0 {
		// Another rebalance stored its plan first: answer what runs.
		resp.Operations, resp.Running = operationsProto(st.UnfinishedMoves()), true
	}
	return resp, nil
}

// ListOperations answers the meta state's operations in id order.
func (c *Cluster) ListOperations(ctx context.Context, req *sundialv1.ListOperationsRequest) (*sundialv1.ListOperationsResponse, error) {
	st, err := c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.ListOperationsResponse{}
	for _, id := range st.OperationIDs() {
		if op := st.Operations[id]; !req.GetUnfinishedOnly() || !op.Finished() {
			resp.Operations = append(resp.Operations, operationProto(op))
		}
	}
	return resp, nil
}

func nodeIDs(ids []meta.NodeID) []uint64 {
	out := make([]uint64, 0, len(ids))
	for _, id := range ids {
		out = append(out, uint64(id))
	}
	return out
}

func operationsProto(ops []meta.Operation) []*sundialv1.Operation {
	out := make([]*sundialv1.Operation, 0, len(ops))
	for i := range ops {
		out = append(out, operationProto(&ops[i]))
	}
	return out
}

func operationProto(op *meta.Operation) *sundialv1.Operation {
	p := &sundialv1.Operation{
		OperationId: uint64(op.ID), Kind: string(op.Kind), ShardId: uint64(op.Shard),
		FromNodeId: uint64(op.From), ToNodeId: uint64(op.To), Reason: op.Reason,
		NewReplicaId: uint64(op.NewReplica), Status: string(op.Status), CurrentStep: int32(op.Current), //nolint:gosec // a handful of steps
		Error: op.Error, CreatedAtMs: op.CreatedAtMs, StartedAtMs: op.StartedAtMs, FinishedAtMs: op.FinishedAtMs,
		Topic: op.Topic, Group: op.Group, Cancel: op.Cancel,
	}
	for _, s := range op.Steps {
		p.Steps = append(p.Steps, &sundialv1.OperationStep{
			Kind: string(s.Kind), NodeId: uint64(s.Node), TimeoutMs: s.TimeoutMs, Rollback: string(s.Rollback), ShardId: uint64(s.Shard),
			Outcome: s.Outcome,
		})
	}
	return p
}
