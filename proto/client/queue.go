package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// ByKey selects the message of topic with the given key.
func ByKey(topic, key string) *sundialv1.MessageSelector {
	return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: key}}
}

// ByID selects the message of topic with the given message id.
func ByID(topic, id string) *sundialv1.MessageSelector {
	return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_MessageId{MessageId: id}}
}

// Cancel removes a pending message from every group. The response's
// outcome is definite: DONE, IN_FLIGHT (a consumer holds it: nothing
// changed), ALREADY_DELIVERED or NOT_FOUND. The call carries a request id,
// new per call unless WithRequestID names one, and is retried with it like
// Publish: the shard answers a retry with the first attempt's outcome and
// changes nothing, so a retried cancel by key never cancels a message
// published under the key after the first attempt applied.
func (c *Client) Cancel(ctx context.Context, sel *sundialv1.MessageSelector, opts ...ChangeOption) (*sundialv1.CancelResponse, error) {
	req := &sundialv1.CancelRequest{Message: sel, RequestId: changeRequestID(opts)}
	var resp *sundialv1.CancelResponse
	err := c.retry(ctx, "cancel", func(ctx context.Context) error {
		var err error
		resp, err = c.producer.Cancel(ctx, req)
		return err
	})
	return resp, err
}

// RescheduleIn moves a pending message to now+delay (measured by the
// server when the first attempt applies: a retry answers that due time).
// The outcome is definite and the call retried like Cancel's.
func (c *Client) RescheduleIn(ctx context.Context, sel *sundialv1.MessageSelector, delay time.Duration, opts ...ChangeOption) (*sundialv1.RescheduleResponse, error) {
	if delay < 0 {
		return nil, fmt.Errorf("%w: reschedule delay %v is negative", ErrInvalidOptions, delay)
	}
	return c.reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel, DelayMs: delay.Milliseconds(), RequestId: changeRequestID(opts)})
}

// RescheduleAt moves a pending message to at, which must not lie (more
// than a second) in the past. Retried like Cancel.
func (c *Client) RescheduleAt(ctx context.Context, sel *sundialv1.MessageSelector, at time.Time, opts ...ChangeOption) (*sundialv1.RescheduleResponse, error) {
	if at.UnixMilli() <= 0 {
		return nil, fmt.Errorf("%w: reschedule time %v is not after 1970", ErrInvalidOptions, at)
	}
	return c.reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: at.UnixMilli(), RequestId: changeRequestID(opts)})
}

func (c *Client) reschedule(ctx context.Context, req *sundialv1.RescheduleRequest) (*sundialv1.RescheduleResponse, error) {
	var resp *sundialv1.RescheduleResponse
	err := c.retry(ctx, "reschedule", func(ctx context.Context) error {
		var err error
		resp, err = c.producer.Reschedule(ctx, req)
		return err
	})
	return resp, err
}

// ChangeOption adjusts one Cancel or Reschedule call.
type ChangeOption func(*changeCall)

type changeCall struct {
	requestID string
}

// WithRequestID makes a Cancel or Reschedule call use id (at most 128
// bytes) as its request id instead of a new one: an application that
// retries the call itself (after its own timeout, or after a restart)
// passes the same id to every attempt, so each answers the first
// attempt's outcome within the dedup window. An id used for another
// request is refused with InvalidArgument.
func WithRequestID(id string) ChangeOption {
	return func(c *changeCall) { c.requestID = id }
}

// changeRequestID is the request id opts name, or a new one.
func changeRequestID(opts []ChangeOption) string {
	var c changeCall
	for _, o := range opts {
		o(&c)
	}
	if c.requestID == "" {
		return NewRequestID()
	}
	return c.requestID
}

// ReceiveOptions says what to pull and how long to wait.
type ReceiveOptions struct {
	Topic string // required
	Group string // empty: "default"
	// MaxMessages bounds the deliveries answered, 1 to 1000 (0: 1).
	MaxMessages int
	// Wait is how long the server waits for a first delivery, up to 20s
	// (0: answer at once).
	Wait time.Duration
	// VisibilityTimeout is the lease of each delivery; 0 means the topic's.
	VisibilityTimeout time.Duration
	AckMode           sundialv1.AckMode
}

func (o ReceiveOptions) validate() error {
	var errs []error
	if o.Topic == "" {
		errs = append(errs, errors.New("topic is required"))
	}
	if o.MaxMessages < 0 || o.MaxMessages > 1000 {
		errs = append(errs, fmt.Errorf("max messages %d is outside 0..1000", o.MaxMessages))
	}
	if o.Wait < 0 || o.Wait > 20*time.Second {
		errs = append(errs, fmt.Errorf("wait %v is outside 0..20s", o.Wait))
	}
	if o.VisibilityTimeout < 0 {
		errs = append(errs, fmt.Errorf("visibility timeout %v is negative", o.VisibilityTimeout))
	}
	if _, ok := sundialv1.AckMode_name[int32(o.AckMode)]; !ok {
		errs = append(errs, fmt.Errorf("unknown ack mode %d", o.AckMode))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}

// Receive pulls up to opts.MaxMessages deliveries, waiting up to opts.Wait
// for the first; an empty slice means none arrived in time. Answer each
// delivery with its Ack, Nack or Extend (unary calls). Receive leases
// messages, so it is retried only on errors apierr.Classify calls Retry
// (Unavailable: the request reached no shard), not after a deadline or an
// internal error; each attempt may take the attempt timeout plus the wait.
func (c *Client) Receive(ctx context.Context, opts ReceiveOptions) ([]*Delivery, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	req := &sundialv1.ReceiveRequest{
		Topic:               opts.Topic,
		Group:               opts.Group,
		MaxMessages:         int32(opts.MaxMessages),
		WaitMs:              opts.Wait.Milliseconds(),
		VisibilityTimeoutMs: opts.VisibilityTimeout.Milliseconds(),
		AckMode:             opts.AckMode,
	}
	var resp *sundialv1.ReceiveResponse
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if c.cfg.attemptTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, c.cfg.attemptTimeout+opts.Wait)
		}
		var err error
		resp, err = c.consumer.Receive(actx, req)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || !apierr.Retryable(err, false) {
			return nil, err
		}
		if !sleep(ctx, max(c.cfg.backoff.Delay(attempt), apierr.RetryDelay(err))) {
			return nil, fmt.Errorf("client: receive: %w (last attempt: %w)", ctx.Err(), err)
		}
	}
	out := make([]*Delivery, 0, len(resp.GetDeliveries()))
	for _, d := range resp.GetDeliveries() {
		out = append(out, &Delivery{Delivery: d, c: c})
	}
	return out, nil
}
