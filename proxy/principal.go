package proxy

import (
	"context"
	"net"

	"google.golang.org/grpc/peer"

	"github.com/sundialmq/sundial/proxy/internal/auth"
)

// principalOf names whom a call counts against in Config.Quotas: its
// authenticated principal ("token:NAME", "cert:NAME"), else the client's
// address ("addr:IP"; every port of a host is one client).
func principalOf(ctx context.Context) string {
	if p := auth.PrincipalOf(ctx); p != nil {
		return p.Kind + ":" + p.Name
	}
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return "addr:unknown"
	}
	if host, _, err := net.SplitHostPort(pr.Addr.String()); err == nil {
		return "addr:" + host
	}
	return "addr:" + pr.Addr.String()
}
