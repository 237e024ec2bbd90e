package proxy

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/forward"
)

// admin serves the Admin service: topic and group settings are forwarded
// to any broker (the meta group holds them); changes that must reach every
// shard of a topic (DeleteTopic, CreateGroup, DeleteGroup) are meta
// operations a broker submits and the executor on the meta leader runs
// (groups.go, adminOperation); what is read or dropped in the event shards
// (stats, purges, listings, histograms, redrives) is fanned out to every
// shard holding the topic's partitions.
type admin struct {
	sundialv1.UnimplementedAdminServer
	s *Server
}

// anyBroker runs one Admin or Cluster call that changes something against
// any reachable broker: one attempt may take the whole forward timeout
// (forward.Forwarder.Any).
func anyBroker[Req, Resp any](ctx context.Context, s *Server, req Req, call func(*grpc.ClientConn, context.Context, Req) (Resp, error)) (Resp, error) {
	return forwardAny(ctx, s.fwd.Any, req, call)
}

// readAnyBroker is anyBroker for calls that only read: a broker that does
// not answer in a part of the time is left for the next
// (forward.Forwarder.AnyRead).
func readAnyBroker[Req, Resp any](ctx context.Context, s *Server, req Req, call func(*grpc.ClientConn, context.Context, Req) (Resp, error)) (Resp, error) {
	return forwardAny(ctx, s.fwd.AnyRead, req, call)
}

func forwardAny[Req, Resp any](ctx context.Context, run func(context.Context, forward.Call) error, req Req, call func(*grpc.ClientConn, context.Context, Req) (Resp, error)) (Resp, error) {
	var resp Resp
	err := run(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = call(conn, ctx, req)
		return err
	})
	return resp, err
}

func adminCall[Req, Resp any](m func(sundialv1.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) func(*grpc.ClientConn, context.Context, Req) (Resp, error) {
	return func(conn *grpc.ClientConn, ctx context.Context, req Req) (Resp, error) {
		return m(sundialv1.NewAdminClient(conn), ctx, req)
	}
}

func (a admin) CreateTopic(ctx context.Context, req *sundialv1.CreateTopicRequest) (*sundialv1.Topic, error) {
	return anyBroker(ctx, a.s, req, adminCall(sundialv1.AdminClient.CreateTopic))
}

func (a admin) ListTopics(ctx context.Context, req *sundialv1.ListTopicsRequest) (*sundialv1.ListTopicsResponse, error) {
	return readAnyBroker(ctx, a.s, req, adminCall(sundialv1.AdminClient.ListTopics))
}

func (a admin) GetClusterInfo(ctx context.Context, req *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	return readAnyBroker(ctx, a.s, req, adminCall(sundialv1.AdminClient.GetClusterInfo))
}

// cluster forwards ListShards, Rebalance, ListOperations, AddShards,
// DrainNode, RemoveNode and CancelOperation (nodes.go) and the join-token
// calls (jointokens.go) to any broker and TransferLeader to the shard's leader, and serves
// WatchRouting from the proxy's own table.
type cluster struct {
	sundialv1.UnimplementedClusterServer
	s *Server
}

func (c cluster) ListShards(ctx context.Context, req *sundialv1.ListShardsRequest) (*sundialv1.ListShardsResponse, error) {
	return readAnyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.ListShardsRequest) (*sundialv1.ListShardsResponse, error) {
		return sundialv1.NewClusterClient(conn).ListShards(ctx, req)
	})
}

// Rebalance checks the request and forwards it to any broker (each plans
// from the meta state and proposes to the meta leader).
func (c cluster) Rebalance(ctx context.Context, req *sundialv1.RebalanceRequest) (*sundialv1.RebalanceResponse, error) {
	if bad := validate.Rebalance(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.RebalanceRequest) (*sundialv1.RebalanceResponse, error) {
		return sundialv1.NewClusterClient(conn).Rebalance(ctx, req)
	})
}

// ListOperations forwards to any broker.
func (c cluster) ListOperations(ctx context.Context, req *sundialv1.ListOperationsRequest) (*sundialv1.ListOperationsResponse, error) {
	return readAnyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.ListOperationsRequest) (*sundialv1.ListOperationsResponse, error) {
		return sundialv1.NewClusterClient(conn).ListOperations(ctx, req)
	})
}

// AddShards checks the request and forwards it to any broker (it proposes
// to the meta leader and waits for the new shards to serve).
func (c cluster) AddShards(ctx context.Context, req *sundialv1.AddShardsRequest) (*sundialv1.AddShardsResponse, error) {
	if bad := validate.AddShards(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.AddShardsRequest) (*sundialv1.AddShardsResponse, error) {
		return sundialv1.NewClusterClient(conn).AddShards(ctx, req)
	})
}

// TransferLeader checks the request and forwards it to the shard's leader
// (the forwarder follows NotLeader answers and answers NotFound for a
// shard the routing table does not list).
func (c cluster) TransferLeader(ctx context.Context, req *sundialv1.TransferLeaderRequest) (*sundialv1.TransferLeaderResponse, error) {
	if bad := validate.TransferLeader(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	var resp *sundialv1.TransferLeaderResponse
	err := c.s.fwd.Do(ctx, req.GetShardId(), func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = sundialv1.NewClusterClient(conn).TransferLeader(ctx, req)
		return err
	})
	return resp, err
}

// WatchRouting sends the current table (waiting for the first), then each
// newer one until the client leaves.
func (c cluster) WatchRouting(_ *sundialv1.WatchRoutingRequest, stream grpc.ServerStreamingServer[sundialv1.RoutingTable]) error {
	ctx := stream.Context()
	var sent *sundialv1.RoutingTable
	for {
		changed := c.s.watcher.Changed()
		if t := c.s.watcher.Table(); t != nil && t.Raw() != sent {
			if err := stream.Send(t.Raw()); err != nil {
				return err
			}
			sent = t.Raw()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
