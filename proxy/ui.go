package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proxy/internal/ui"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// errNotServing answers the UI's calls before Start or after Stop.
var errNotServing = errors.New("proxy: grpc listener not open")

// newUI builds the admin UI over a client of the proxy's own gRPC
// listener, so its calls take the path every client's takes (validation,
// the error boundary, metrics). The connection is lazy: it dials the
// listener's address, known once Start has run, on the first call.
func (s *Server) newUI() (*ui.Handler, *grpc.ClientConn, error) {
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		addr := s.GRPCAddr()
		if addr == "" {
			return nil, errNotServing
		}
		// A listener on every interface is reached on loopback.
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	conn, err := grpc.NewClient("passthrough:///sundial-proxy-self",
		grpc.WithTransportCredentials(s.tls.self),
		grpc.WithContextDialer(dial))
	if err != nil {
		return nil, nil, fmt.Errorf("proxy: ui client: %w", err)
	}
	h := ui.New(ui.API{
		Admin:    sundialv1.NewAdminClient(conn),
		Producer: sundialv1.NewProducerClient(conn),
		Cluster:  sundialv1.NewClusterClient(conn),
		Backups:  sundialv1.NewBackupsClient(conn),
	}, s.log.Named("ui"), ui.Options{Login: s.cfg.Auth.Enabled, SecureCookie: s.cfg.TLSCertFile != ""})
	return h, conn, nil
}
