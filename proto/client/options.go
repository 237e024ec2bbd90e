package client

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// DefaultAddr is the proxy address clients use when given none.
const DefaultAddr = "127.0.0.1:7400"

type config struct {
	dialOpts       []grpc.DialOption
	creds          credentials.TransportCredentials
	tlsFiles       tlsfiles.Files
	backoff        Backoff
	attemptTimeout time.Duration
}

func defaultConfig() config {
	return config{
		backoff:        DefaultBackoff(),
		attemptTimeout: 30 * time.Second,
	}
}

// Option configures Dial.
type Option func(*config)

// WithDialOptions appends raw gRPC dial options (interceptors, keepalive,
// message size limits).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithTransportCredentials sets TLS (or other) transport credentials. The
// default is plaintext.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(c *config) { c.creds = creds }
}

// WithTLSFiles dials the proxy over TLS with the files f names: CAFile
// (PEM) to verify the proxy's certificate against, the system roots if
// empty, and CertFile and KeyFile, if set, as the client certificate a
// proxy with a client CA requires. The files are read at Dial (an error
// names a bad one) and reloaded when they change. It replaces
// WithTransportCredentials.
func WithTLSFiles(f tlsfiles.Files) Option {
	return func(c *config) { c.tlsFiles, c.creds = f, nil }
}

// WithBackoff sets the retry backoff of Publish, the unary ack calls and
// Subscribe's reconnects.
func WithBackoff(b Backoff) Option {
	return func(c *config) { c.backoff = b }
}

// WithAttemptTimeout bounds each attempt of a retried unary call (default
// 30s). An attempt that runs out of time is retried while the caller's
// context lives. Zero disables the per-attempt bound.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) { c.attemptTimeout = d }
}

// WithToken sends secret as the bearer token of every call
// (authorization: Bearer secret), for a proxy with authentication on. It
// is sent over plaintext too, so use it with TLS off loopback.
func WithToken(secret string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearerToken(secret)))
}

// TokenCredentials are the per-call credentials WithToken adds, for a
// caller dialing the API with its own grpc.ClientConn (generated clients,
// grpcurl-like tools): grpc.WithPerRPCCredentials(TokenCredentials(s)).
func TokenCredentials(secret string) credentials.PerRPCCredentials { return bearerToken(secret) }

// bearerToken is a token as gRPC per-call credentials.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false: make run's loopback cluster is
// plaintext; secure-by-default keeps plaintext proxies on loopback.
func (bearerToken) RequireTransportSecurity() bool { return false }
