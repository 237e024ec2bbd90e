package proxy

import (
	"context"

	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// DrainNode checks the request and forwards it to any broker (which
// forwards it to the meta leader).
func (c cluster) DrainNode(ctx context.Context, req *sundialv1.DrainNodeRequest) (*sundialv1.DrainNodeResponse, error) {
	if bad := validate.DrainNode(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.DrainNodeRequest) (*sundialv1.DrainNodeResponse, error) {
		return sundialv1.NewClusterClient(conn).DrainNode(ctx, req)
	})
}

// RemoveNode checks the request and forwards it to any broker (which
// forwards it to the meta leader).
func (c cluster) RemoveNode(ctx context.Context, req *sundialv1.RemoveNodeRequest) (*sundialv1.RemoveNodeResponse, error) {
	if bad := validate.RemoveNode(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.RemoveNodeRequest) (*sundialv1.RemoveNodeResponse, error) {
		return sundialv1.NewClusterClient(conn).RemoveNode(ctx, req)
	})
}

// CancelOperation checks the request and forwards it to any broker (which
// records the cancel in the meta group and waits for the rollback). A
// retry after a try that took effect is harmless: the cancel of a
// cancelled operation answers it again.
func (c cluster) CancelOperation(ctx context.Context, req *sundialv1.CancelOperationRequest) (*sundialv1.CancelOperationResponse, error) {
	if bad := validate.CancelOperation(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, c.s, req, func(conn *grpc.ClientConn, ctx context.Context, req *sundialv1.CancelOperationRequest) (*sundialv1.CancelOperationResponse, error) {
		return sundialv1.NewClusterClient(conn).CancelOperation(ctx, req)
	})
}
