package service

import (
	"context"
	"errors"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// JoinCluster registers a new broker (host.Join). A broker that does not
// lead the meta group forwards the call once to the leader it knows; with
// no leader known, or on a forwarded call, it answers NotLeader for the
// meta group (shard meta.ShardID) and the joining broker tries another.
func (c *Cluster) JoinCluster(ctx context.Context, req *sundialv1.JoinClusterRequest) (*sundialv1.JoinClusterResponse, error) {
	if bad := validate.JoinCluster(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	n := meta.Node{ID: meta.NodeID(req.GetNodeId()), RaftAddr: req.GetRaftAddr(), GRPCAddr: req.GetGrpcAddr(), Incarnation: req.GetIncarnation(), Labels: req.GetLabels()}
	joined, err := c.meta.Join(ctx, n, req.GetClusterId())
	var notLeader *host.NotMetaLeaderError
	if errors.As(err, &notLeader) {
		if notLeader.LeaderAddr == "" || forwarded(ctx) {
			return nil, apierr.NotLeader(meta.ShardID, notLeader.Leader, notLeader.LeaderAddr)
		}
		return forwardTo(ctx, c.opts.Peers, notLeader.LeaderAddr, sundialv1.NewClusterClient, sundialv1.ClusterClient.JoinCluster, req)
	}
	if err != nil {
		return nil, err
	}
	return &sundialv1.JoinClusterResponse{NodeId: uint64(joined.ID), ClusterId: c.meta.Meta().ClusterID}, nil
}
