package proxy

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// CreateJoinToken checks the request and forwards it to any broker (it
// proposes the token's hash to the meta group).
func (c cluster) CreateJoinToken(ctx context.Context, req *sundialv1.CreateJoinTokenRequest) (*sundialv1.CreateJoinTokenResponse, error) {
	if bad := validate.CreateJoinToken(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.CreateJoinTokenRequest) (*sundialv1.CreateJoinTokenResponse, error) {
		return sundialv1.NewClusterClient(conn).CreateJoinToken(ctx, req)
	})
}

// ListJoinTokens forwards to any broker.
func (c cluster) ListJoinTokens(ctx context.Context, req *sundialv1.ListJoinTokensRequest) (*sundialv1.ListJoinTokensResponse, error) {
	return readAnyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.ListJoinTokensRequest) (*sundialv1.ListJoinTokensResponse, error) {
		return sundialv1.NewClusterClient(conn).ListJoinTokens(ctx, req)
	})
}

// RevokeJoinToken checks the request and forwards it to any broker.
func (c cluster) RevokeJoinToken(ctx context.Context, req *sundialv1.RevokeJoinTokenRequest) (*sundialv1.RevokeJoinTokenResponse, error) {
	if bad := validate.RevokeJoinToken(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.RevokeJoinTokenRequest) (*sundialv1.RevokeJoinTokenResponse, error) {
		return sundialv1.NewClusterClient(conn).RevokeJoinToken(ctx, req)
	})
}
