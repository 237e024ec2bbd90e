package service

import (
	"context"
	"errors"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// JoinCluster registers a new broker (host.Join). Its join token is
// checked first (joinUse), so a refused caller learns nothing about the
// cluster. A broker that does not lead the meta group forwards the call
// once to the leader it knows; with no leader known, or on a forwarded
// call, it answers NotLeader for the meta group (shard meta.ShardID) and
// the joining broker tries another (Unavailable, naming no leader, when
// this broker could not check the token itself).
func (c *Cluster) JoinCluster(ctx context.Context, req *sundialv1.JoinClusterRequest) (*sundialv1.JoinClusterResponse, error) {
	if bad := validate.JoinCluster(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	use, checked, err := c.joinUse(ctx, req)
	if err != nil {
		return nil, err
	}
	n := meta.Node{ID: meta.NodeID(req.GetNodeId()), RaftAddr: req.GetRaftAddr(), GRPCAddr: req.GetGrpcAddr(), Incarnation: req.GetIncarnation(), Labels: req.GetLabels()}
	joined, err := c.meta.Join(ctx, n, req.GetClusterId(), use)
	var notLeader *host.NotMetaLeaderError
	if errors.As(err, &notLeader) {
		if notLeader.LeaderAddr == "" || forwarded(ctx) {
			if !checked {
				return nil, status.Error(codes.Unavailable, "join: this broker cannot check the join token now; try another broker or again later")
			}
			return nil, apierr.NotLeader(meta.ShardID, notLeader.Leader, notLeader.LeaderAddr)
		}
		return forwardTo(ctx, c.opts.Peers, notLeader.LeaderAddr, sundialv1.NewClusterClient, sundialv1.ClusterClient.JoinCluster, req)
	}
	var denied *host.JoinDeniedError
	if errors.As(err, &denied) {
		c.opts.Gate.Refuse(ctx, denied.Reason, zap.String("method", "JoinCluster"), zap.String("join_token_id", use.ID))
	}
	if err != nil {
		return nil, err
	}
	return &sundialv1.JoinClusterResponse{NodeId: uint64(joined.ID), ClusterId: c.meta.Meta().ClusterID}, nil
}
