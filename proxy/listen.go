package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// ListenLimits bound what clients can hold on the proxy's listeners. A zero
// field means the value of DefaultListenLimits. docs/security.md ("Limits")
// says what each refusal looks like to a client.
type ListenLimits struct {
	// MaxConnections bounds the open connections of each listener (gRPC,
	// HTTP, admin, metrics); a connection over it is closed as soon as it
	// is accepted. Default 4096.
	MaxConnections int
	// HTTPReadHeaderTimeout bounds reading a request's headers. Default 10s.
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout bounds reading a whole request, body included: a body
	// still arriving then is cut, its request answered 400 and the
	// connection closed. Default 30s.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout bounds writing an answer, from the end of the
	// request's headers (it covers the handler's time too, so it must
	// exceed the longest call: a Receive waits at most 20s). Default 2m.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout bounds how long a keep-alive connection waits for its
	// next request. Default 2m.
	HTTPIdleTimeout time.Duration
	// GRPCMaxConcurrentStreams bounds the streams (calls) open at once on
	// one gRPC connection; a client's further calls wait for one to end.
	// Default 1000.
	GRPCMaxConcurrentStreams uint32
	// GRPCMaxRecvMsgBytes bounds one gRPC request message; a larger one is
	// refused with ResourceExhausted. Default 4 MiB. (An HTTP API body is
	// bounded by httpapi.MaxBodyBytes, 8 MiB.)
	GRPCMaxRecvMsgBytes int
	// GRPCMaxHeaderListBytes bounds a call's metadata (HTTP/2 header list).
	// Default 64 KiB.
	GRPCMaxHeaderListBytes uint32
	// GRPCKeepaliveMinTime is the shortest interval between a client's
	// keepalive pings the proxy tolerates (a client pinging faster is
	// disconnected with ENHANCE_YOUR_CALM); pings without an open call are
	// allowed. Default 10s.
	GRPCKeepaliveMinTime time.Duration
}

// DefaultListenLimits are the listener limits a proxy starts with.
func DefaultListenLimits() ListenLimits {
	return ListenLimits{
		MaxConnections:           4096,
		HTTPReadHeaderTimeout:    10 * time.Second,
		HTTPReadTimeout:          30 * time.Second,
		HTTPWriteTimeout:         2 * time.Minute,
		HTTPIdleTimeout:          2 * time.Minute,
		GRPCMaxConcurrentStreams: 1000,
		GRPCMaxRecvMsgBytes:      4 << 20,
		GRPCMaxHeaderListBytes:   64 << 10,
		GRPCKeepaliveMinTime:     10 * time.Second,
	}
}

func (l ListenLimits) withDefaults() ListenLimits {
	d := DefaultListenLimits()
	if l.MaxConnections <= 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.HTTPReadHeaderTimeout <= 0 {
		l.HTTPReadHeaderTimeout = d.HTTPReadHeaderTimeout
	}
	if l.HTTPReadTimeout <= 0 {
		l.HTTPReadTimeout = d.HTTPReadTimeout
	}
	if l.HTTPWriteTimeout <= 0 {
		l.HTTPWriteTimeout = d.HTTPWriteTimeout
	}
	if l.HTTPIdleTimeout <= 0 {
		l.HTTPIdleTimeout = d.HTTPIdleTimeout
	}
	if l.GRPCMaxConcurrentStreams == 0 {
		l.GRPCMaxConcurrentStreams = d.GRPCMaxConcurrentStreams
	}
	if l.GRPCMaxRecvMsgBytes <= 0 {
		l.GRPCMaxRecvMsgBytes = d.GRPCMaxRecvMsgBytes
	}
	if l.GRPCMaxHeaderListBytes == 0 {
		l.GRPCMaxHeaderListBytes = d.GRPCMaxHeaderListBytes
	}
	if l.GRPCKeepaliveMinTime <= 0 {
		l.GRPCKeepaliveMinTime = d.GRPCKeepaliveMinTime
	}
	return l
}

func (l ListenLimits) validate() error {
	if l.MaxConnections < 0 || l.HTTPReadHeaderTimeout < 0 || l.HTTPReadTimeout < 0 || l.HTTPWriteTimeout < 0 ||
		l.HTTPIdleTimeout < 0 || l.GRPCMaxRecvMsgBytes < 0 || l.GRPCKeepaliveMinTime < 0 {
		return errors.New("listen_limits: must not be negative")
	}
	return nil
}

// grpcOptions are the gRPC server options enforcing l.
func (l ListenLimits) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.GRPCMaxConcurrentStreams),
		grpc.MaxRecvMsgSize(l.GRPCMaxRecvMsgBytes),
		grpc.MaxHeaderListSize(l.GRPCMaxHeaderListBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.GRPCKeepaliveMinTime, PermitWithoutStream: true}),
	}
}

// httpServer is an HTTP server of h with l's timeouts.
func (l ListenLimits) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.HTTPReadHeaderTimeout,
		ReadTimeout:       l.HTTPReadTimeout,
		WriteTimeout:      l.HTTPWriteTimeout,
		IdleTimeout:       l.HTTPIdleTimeout,
		MaxHeaderBytes:    int(l.GRPCMaxHeaderListBytes),
	}
}

// Reasons of sundial_proxy_refused_total.
const (
	refusedConnections = "connections"  // a listener at MaxConnections
	refusedBodyTimeout = "body_timeout" // a request body cut at HTTPReadTimeout
	refusedBodySize    = "body_size"    // a request body over the HTTP API's limit
	refusedContentType = "content_type" // a write without Content-Type application/json
	refusedCrossSite   = "cross_site"   // a browser's cross-site request, or a foreign Origin
	refusedHost        = "host"         // a Host header not among the allowed names
)

// refusals counts what the listeners refuse, by listener and reason.
type refusals struct{ c *prometheus.CounterVec }

func newRefusals(reg prometheus.Registerer) refusals {
	return refusals{promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "sundial_proxy_refused_total",
		Help: "Connections and HTTP requests the proxy's listeners refused before any RPC, by listener and reason.",
	}, []string{"listener", "reason"})}
}

func (r refusals) inc(listener, reason string) { r.c.WithLabelValues(listener, reason).Inc() }

// limitListener closes each connection accepted while max are open (unlike
// netutil.LimitListener, which stops accepting: the backlog then fills and
// nothing counts the refusals).
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func()
}

func limitConns(l net.Listener, maxConns int, refused func()) net.Listener {
	return &limitListener{Listener: l, max: int64(maxConns), refused: refused}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			l.refused()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn gives its slot back on its first Close.
type countedConn struct {
	net.Conn
	l      *limitListener
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}

// listen opens addr with at most maxConns connections open at once, each
// refusal counted under name.
func (s *Server) listen(ctx context.Context, lc *net.ListenConfig, name, addr string) (net.Listener, error) {
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen %s: %w", name, err)
	}
	return limitConns(l, s.cfg.ListenLimits.withDefaults().MaxConnections, func() { s.refused.inc(name, refusedConnections) }), nil
}
