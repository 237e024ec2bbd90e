package service

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// TransferLeader asks Dragonboat to move a shard's leadership to the
// replica on req.ToNodeId (0: the first replica, in placement order, on
// another node). Only the shard's leader acts: any other broker answers
// NotLeader (or WrongShard when it holds no replica), which the proxy's
// forwarder follows like every shard-level call. The leader first ends its
// dispatcher's lease (host.Moves.TransferLeadership), then queues the request;
// the answer does not wait for the election.
func (c *Cluster) TransferLeader(ctx context.Context, req *sundialv1.TransferLeaderRequest) (*sundialv1.TransferLeaderResponse, error) {
	if bad := validate.TransferLeader(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	id := req.GetShardId()
	sh, ok := c.meta.Meta().Shards[meta.EventShardID(id)]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "shard %d not found", id)
	}
	to := req.GetToNodeId()
	if to != 0 {
		if _, ok := sh.ReplicaOn(meta.NodeID(to)); !ok {
			return nil, apierr.FailedPrecondition(apierr.FieldViolation{
				Field: "to_node_id", Description: fmt.Sprintf("node %d holds no replica of shard %d", to, id),
			})
		}
	}
	lead, node, addr, hosted := c.replicas.LeaderInfo(id)
	switch {
	case !hosted:
		return nil, apierr.WrongShard(id, c.meta.Meta().Version)
	case lead == nil:
		return nil, apierr.NotLeader(id, node, addr)
	}
	if to == 0 {
		to = otherReplica(sh, node)
		if to == 0 {
			return nil, apierr.FailedPrecondition(apierr.FieldViolation{
				Field: "to_node_id", Description: fmt.Sprintf("shard %d has no replica on a node other than its leader %d", id, node),
			})
		}
	}
	resp := &sundialv1.TransferLeaderResponse{ShardId: id, FromNodeId: node, ToNodeId: to}
	if to == node {
		return resp, nil
	}
	if err := c.moves.TransferLeadership(ctx, id, to); err != nil {
		return nil, err
	}
	return resp, nil
}

// otherReplica is the node of sh's first replica not on node, or 0.
func otherReplica(sh *meta.Shard, node uint64) uint64 {
	for _, r := range sh.Replicas {
		if uint64(r.Node) != node {
			return uint64(r.Node)
		}
	}
	return 0
}
