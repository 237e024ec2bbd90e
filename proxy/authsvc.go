package proxy

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proxy/internal/auth"
	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// authService forwards the Auth service to any broker; the guard admitted
// the caller (admin) first when authentication is on.
type authService struct {
	sundialv1.UnimplementedAuthServer
	s *Server
}

func authCall[Req, Resp any](m func(sundialv1.AuthClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) func(*grpc.ClientConn, context.Context, Req) (Resp, error) {
	return func(conn *grpc.ClientConn, ctx context.Context, req Req) (Resp, error) {
		return m(sundialv1.NewAuthClient(conn), ctx, req)
	}
}

func (a authService) CreateToken(ctx context.Context, req *sundialv1.CreateTokenRequest) (*sundialv1.CreateTokenResponse, error) {
	return anyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.CreateToken))
}

func (a authService) ListTokens(ctx context.Context, req *sundialv1.ListTokensRequest) (*sundialv1.ListTokensResponse, error) {
	return readAnyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.ListTokens))
}

func (a authService) RevokeToken(ctx context.Context, req *sundialv1.RevokeTokenRequest) (*sundialv1.RevokeTokenResponse, error) {
	return anyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.RevokeToken))
}

func (a authService) CreateRole(ctx context.Context, req *sundialv1.CreateRoleRequest) (*sundialv1.Role, error) {
	return anyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.CreateRole))
}

func (a authService) ListRoles(ctx context.Context, req *sundialv1.ListRolesRequest) (*sundialv1.ListRolesResponse, error) {
	return readAnyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.ListRoles))
}

func (a authService) DeleteRole(ctx context.Context, req *sundialv1.DeleteRoleRequest) (*sundialv1.DeleteRoleResponse, error) {
	return anyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.DeleteRole))
}

func (a authService) RotateReceiptKey(ctx context.Context, req *sundialv1.RotateReceiptKeyRequest) (*sundialv1.RotateReceiptKeyResponse, error) {
	return anyBroker(ctx, a.s, req, authCall(sundialv1.AuthClient.RotateReceiptKey))
}

// authGuard is the proxy's authentication: the state followed from the
// brokers and the interceptors deciding every call from it.
type authGuard struct {
	store   *auth.Store
	watcher *auth.Watcher
	guard   *auth.Guard
}

// newAuthGuard builds the guard of an enabled Config.Auth.
func (s *Server) newAuthGuard(reg prometheus.Registerer) *authGuard {
	store := auth.NewStore()
	addrs := func() []string { return watchAddrs(s.cfg.Brokers, s.watcher.Table()) }
	return &authGuard{
		store:   store,
		watcher: auth.NewWatcher(store, s.pool, addrs, s.log.Named("auth")),
		guard:   auth.NewGuard(auth.NewAuthenticator(store, s.cfg.Auth.certRules(), nil), store, s.log, reg),
	}
}

// watchAddrs are the seeds, then the table's other brokers.
func watchAddrs(seeds []string, t *routing.Table) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range append(append([]string(nil), seeds...), t.NodeAddrs()...) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// bootstrapAuth stores the bootstrap token (its hash) through any broker,
// retrying until the cluster answers or ctx ends.
func (s *Server) bootstrapAuth(ctx context.Context, secret string) {
	req := &brokerv1.BootstrapAuthRequest{TokenName: "bootstrap", TokenSha256: auth.Hash(secret)}
	for {
		var resp *brokerv1.BootstrapAuthResponse
		err := s.fwd.Any(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			resp, err = brokerv1.NewAuthSyncClient(conn).BootstrapAuth(ctx, req)
			return err
		})
		if err == nil {
			s.log.Info("auth bootstrap token", zap.Bool("stored", resp.GetBootstrapped()))
			return
		}
		s.log.Warn("auth bootstrap failed, retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
