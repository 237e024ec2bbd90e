package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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
	}, s.log.Named("ui"))
	return h, conn, nil
}

// forwardAuthorization passes a request's Authorization header on to the
// UI's calls of the proxy's own gRPC port, so that with authentication on
// the UI shows and does what that token's role allows (a reverse proxy in
// front of the UI, or curl, sets the header; the UI has no login yet).
func forwardAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			r = r.WithContext(metadata.AppendToOutgoingContext(r.Context(), "authorization", h))
		}
		next.ServeHTTP(w, r)
	})
}
