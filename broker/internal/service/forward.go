package service

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
)

// Calls served on the meta leader (JoinCluster, DrainNode, RemoveNode,
// Rebalance, and GetClusterInfo for what the healer knows) are forwarded
// to it by whichever broker receives them, once: forwardedKey marks the
// forwarded call and its receiver answers NotLeader instead of forwarding
// again, so a stale view never makes a loop.
//
// A call is named by its client constructor and method expression, as in
//
//	forwardTo(ctx, peers, addr, sundialv1.NewClusterClient, sundialv1.ClusterClient.DrainNode, req)

// forwardedKey marks a call forwarded by a broker to the meta leader it
// knows. The name is older than its use for every forwarded call.
const forwardedKey = "sundial-join-forwarded"

// rpc is a unary method of a gRPC client, as a method expression.
type rpc[C, Req, Resp any] func(C, context.Context, Req, ...grpc.CallOption) (Resp, error)

// toMetaLeader forwards the call to the meta leader when it is another
// broker and answers true with its result; on the meta leader it answers
// false and the caller serves the call. With no leader known, or on a
// call forwarded already that did not land on the leader, it answers true
// with NotLeader for the meta group, so the client retries.
func toMetaLeader[C, Req, Resp any](ctx context.Context, m *host.MetaClient, peers *peer.Conns, client func(grpc.ClientConnInterface) C, method rpc[C, Req, Resp], req Req) (Resp, bool, error) {
	var zero Resp
	addr, err := metaLeaderElsewhere(ctx, m)
	switch {
	case err != nil:
		return zero, true, err
	case addr == "":
		return zero, false, nil
	}
	resp, err := forwardTo(ctx, peers, addr, client, method, req)
	return resp, true, err
}

// metaLeaderElsewhere answers the gRPC address of the meta leader when it
// is another broker and the call was not forwarded already; empty when
// this broker leads. A forwarded call that does not land on the leader,
// or no leader known, answers NotLeader for the meta group.
func metaLeaderElsewhere(ctx context.Context, m *host.MetaClient) (string, error) {
	leader := m.MetaLeader()
	if leader != 0 && leader == m.NodeID() {
		return "", nil
	}
	var addr string
	if n, ok := m.Meta().Nodes[meta.NodeID(leader)]; ok && leader != 0 {
		addr = n.GRPCAddr
	}
	if addr == "" || forwarded(ctx) {
		return "", apierr.NotLeader(meta.ShardID, leader, addr)
	}
	return addr, nil
}

// forwarded says the call came from another broker (see forwardedKey).
func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// forwardTo makes the call once on the broker at addr, over peers,
// marked forwarded.
func forwardTo[C, Req, Resp any](ctx context.Context, peers *peer.Conns, addr string, client func(grpc.ClientConnInterface) C, method rpc[C, Req, Resp], req Req) (Resp, error) {
	var zero Resp
	conn, err := peers.Conn(addr)
	if err != nil {
		return zero, fmt.Errorf("forward to the meta leader at %s: %w", addr, err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
	return method(client(conn), ctx, req)
}
