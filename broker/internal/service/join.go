package service

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// forwardedKey marks a JoinCluster, DrainNode or RemoveNode call
// forwarded by a broker to the meta leader it knows; the receiver answers
// NotLeader instead of forwarding again, so a stale view never makes a
// loop.
const forwardedKey = "sundial-join-forwarded"

// JoinCluster registers a new broker (host.Join). A broker that does not
// lead the meta group forwards the call once to the leader it knows; with
// no leader known, or on a forwarded call, it answers NotLeader for the
// meta group (shard meta.ShardID) and the joining broker tries another.
func (c *Cluster) JoinCluster(ctx context.Context, req *sundialv1.JoinClusterRequest) (*sundialv1.JoinClusterResponse, error) {
	if bad := validate.JoinCluster(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	n := meta.Node{ID: meta.NodeID(req.GetNodeId()), RaftAddr: req.GetRaftAddr(), GRPCAddr: req.GetGrpcAddr(), Incarnation: req.GetIncarnation(), Labels: req.GetLabels()}
	joined, err := c.host.Join(ctx, n, req.GetClusterId())
	var notLeader *host.NotMetaLeaderError
	if errors.As(err, &notLeader) {
		md, _ := metadata.FromIncomingContext(ctx)
		if notLeader.LeaderAddr == "" || len(md.Get(forwardedKey)) > 0 {
			return nil, apierr.NotLeader(meta.ShardID, notLeader.Leader, notLeader.LeaderAddr)
		}
		return forwardJoin(ctx, notLeader.LeaderAddr, req)
	}
	if err != nil {
		return nil, joinStatus(err)
	}
	return &sundialv1.JoinClusterResponse{NodeId: uint64(joined.ID), ClusterId: c.host.Meta().ClusterID}, nil
}

func forwardJoin(ctx context.Context, addr string, req *sundialv1.JoinClusterRequest) (*sundialv1.JoinClusterResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, toStatus(fmt.Errorf("forward join to the meta leader at %s: %w", addr, err))
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
	return sundialv1.NewClusterClient(conn).JoinCluster(ctx, req)
}

// joinStatus maps Join's refusals onto codes: a taken node id
// AlreadyExists, another cluster's data dir FailedPrecondition, a cluster
// not bootstrapped yet Unavailable (retry later); the rest as toStatus.
func joinStatus(err error) error {
	switch {
	case errors.Is(err, host.ErrNodeIDTaken):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, host.ErrOtherCluster):
		return apierr.FailedPrecondition(apierr.FieldViolation{Field: "cluster_id", Description: err.Error()})
	case errors.Is(err, host.ErrNotBootstrapped):
		return status.Error(codes.Unavailable, err.Error())
	}
	return toStatus(err)
}
