package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// Errors returned by the client.
var (
	ErrNoAddrs          = errors.New("client: no proxy addresses")
	ErrPublisherClosed  = errors.New("client: publisher closed")
	ErrInvalidOptions   = errors.New("client: invalid options")
	ErrShortResponse    = errors.New("client: server answered fewer results than messages")
	errSessionEnded     = errors.New("client: subscribe stream ended")
	resolverSchemeCount atomic.Uint64
)

// Client is a connection to the Sundial proxy tier. It is safe for
// concurrent use.
type Client struct {
	cfg      config
	conn     *grpc.ClientConn
	producer sundialv1.ProducerClient
	consumer sundialv1.ConsumerClient
	admin    sundialv1.AdminClient
	cluster  sundialv1.ClusterClient
}

// Dial connects to the given proxy addresses (host:port). Calls are spread
// round-robin over them. Dial does not wait for a connection; the first call
// does. ctx is not used after Dial returns.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	var state resolver.State
	for _, a := range addrs {
		for _, part := range strings.Split(a, ",") {
			if part = strings.TrimSpace(part); part != "" {
				// The TLS server name is the address's host, not the
				// dial target's ("proxy").
				host, _, err := net.SplitHostPort(part)
				if err != nil {
					host = part
				}
				state.Addresses = append(state.Addresses, resolver.Address{Addr: part, ServerName: host})
			}
		}
	}
	if len(state.Addresses) == 0 {
		return nil, ErrNoAddrs
	}
	// A private scheme per client keeps two clients' resolvers apart.
	r := manual.NewBuilderWithScheme(fmt.Sprintf("sundial-%d", resolverSchemeCount.Add(1)))
	r.InitialState(state)
	creds := cfg.creds
	switch {
	case cfg.tlsFiles.Enabled():
		src, err := tlsfiles.New("client", cfg.tlsFiles, 0, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		creds = credentials.NewTLS(src.ClientConfig())
	case creds == nil:
		creds = insecure.NewCredentials()
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
	}, cfg.dialOpts...)
	conn, err := grpc.NewClient(r.Scheme()+":///proxy", dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %v: %w", addrs, err)
	}
	return &Client{
		cfg:      cfg,
		conn:     conn,
		producer: sundialv1.NewProducerClient(conn),
		consumer: sundialv1.NewConsumerClient(conn),
		admin:    sundialv1.NewAdminClient(conn),
		cluster:  sundialv1.NewClusterClient(conn),
	}, nil
}

// Close closes the connection. Calls in progress fail with Canceled.
func (c *Client) Close() error { return c.conn.Close() }

// Conn returns the underlying gRPC connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Admin returns the generated Admin client (topics, cluster view).
func (c *Client) Admin() sundialv1.AdminClient { return c.admin }

// Cluster returns the generated Cluster client (routing, shards).
func (c *Client) Cluster() sundialv1.ClusterClient { return c.cluster }

// Producer returns the generated Producer client.
func (c *Client) Producer() sundialv1.ProducerClient { return c.producer }

// Consumer returns the generated Consumer client.
func (c *Client) Consumer() sundialv1.ConsumerClient { return c.consumer }

// Publish stores msgs as one batch and returns one result per message, in
// order. A message that was not stored has its result's Error set (see
// StatusError). The returned error is set only when the call as a whole
// failed. The call is retried with the same request id, until ctx ends,
// on every error apierr.Classify does not call Permanent (Unavailable, an
// attempt's own deadline, an internal error); the request id makes the
// retry answer the first attempt's ids. Reusing a request id for other
// messages is refused with InvalidArgument.
func (c *Client) Publish(ctx context.Context, msgs ...*sundialv1.Message) ([]*sundialv1.PublishResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	req := &sundialv1.PublishRequest{RequestId: NewRequestID(), Messages: msgs}
	return c.publish(ctx, req)
}

func (c *Client) publish(ctx context.Context, req *sundialv1.PublishRequest) ([]*sundialv1.PublishResult, error) {
	var resp *sundialv1.PublishResponse
	err := c.retry(ctx, "publish", func(ctx context.Context) error {
		var err error
		resp, err = c.producer.Publish(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := resp.GetResults()
	if len(res) != len(req.GetMessages()) {
		return res, fmt.Errorf("%w: %d results for %d messages", ErrShortResponse, len(res), len(req.GetMessages()))
	}
	return res, nil
}

// StatusError converts the error of one publish or receipt result
// (result.GetError()) into a Go error carrying the gRPC status, or nil.
func StatusError(s *spb.Status) error {
	if s == nil || s.GetCode() == int32(codes.OK) {
		return nil
	}
	return status.ErrorProto(s)
}

// Ack acknowledges deliveries by receipt. Per-receipt outcomes are in the
// results (StatusError); the error is set when the call failed as a whole.
// Acks are idempotent and retried like Publish.
func (c *Client) Ack(ctx context.Context, receipts ...string) ([]*sundialv1.ReceiptResult, error) {
	var resp *sundialv1.AckResponse
	err := c.retry(ctx, "ack", func(ctx context.Context) error {
		var err error
		resp, err = c.consumer.Ack(ctx, &sundialv1.AckRequest{Receipts: receipts})
		return err
	})
	return resp.GetResults(), err
}

// Nack hands deliveries back for redelivery after delay (0: after the
// topic's exponential backoff for each delivery's attempt).
func (c *Client) Nack(ctx context.Context, delay time.Duration, reason string, receipts ...string) ([]*sundialv1.ReceiptResult, error) {
	var resp *sundialv1.NackResponse
	err := c.retry(ctx, "nack", func(ctx context.Context) error {
		var err error
		resp, err = c.consumer.Nack(ctx, &sundialv1.NackRequest{Receipts: receipts, DelayMs: delay.Milliseconds(), Reason: reason})
		return err
	})
	return resp.GetResults(), err
}

// Extend pushes the lease deadline of deliveries to now+d (0: the
// visibility timeout). Each result carries the new deadline.
func (c *Client) Extend(ctx context.Context, d time.Duration, receipts ...string) ([]*sundialv1.ReceiptResult, error) {
	var resp *sundialv1.ExtendResponse
	err := c.retry(ctx, "extend", func(ctx context.Context) error {
		var err error
		resp, err = c.consumer.Extend(ctx, &sundialv1.ExtendRequest{Receipts: receipts, ExtendMs: d.Milliseconds()})
		return err
	})
	return resp.GetResults(), err
}

// retry runs call until it succeeds, fails with an error apierr.Classify
// calls Permanent, or ctx ends. call must be idempotent (a publish with its
// request id, acks, nacks, extends): Unknown errors (an attempt's own
// deadline, an internal error) are retried too. Each attempt gets the
// configured attempt timeout; the wait before the next is the backoff's,
// or longer if the server asked for longer (a rate limit's RetryInfo).
func (c *Client) retry(ctx context.Context, op string, call func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if c.cfg.attemptTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, c.cfg.attemptTimeout)
		}
		err := call(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// Both errors.Is(err, ctx.Err()) and status.Code(err) work.
			return fmt.Errorf("client: %s: %w (last attempt: %w)", op, ctx.Err(), err)
		}
		if !apierr.Retryable(err, true) {
			return err
		}
		if !sleep(ctx, max(c.cfg.backoff.Delay(attempt), apierr.RetryDelay(err))) {
			return fmt.Errorf("client: %s: %w (last attempt: %w)", op, ctx.Err(), err)
		}
	}
}

// NewRequestID returns a random 128-bit request id in hex.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
