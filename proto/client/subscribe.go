package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/frame"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// SubscribeOptions says what to consume and how.
type SubscribeOptions struct {
	Topic string // required
	Group string // empty: "default"
	// MaxInFlight is the number of deliveries held at once: the stream's
	// credit and the bound on concurrently running handlers (default 64).
	MaxInFlight int
	// VisibilityTimeout is the lease of each delivery; 0 means the topic's.
	VisibilityTimeout time.Duration
	AckMode           sundialv1.AckMode
	// OnStarted, when set, is called each time a stream is in place: the
	// group exists on every shard of the topic (a group this Subscribe
	// creates included), so every message published after the call
	// reaches it. It is called before any delivery of that stream and must
	// not block.
	OnStarted func()
	// OnStreamError, when set, is called with the error of each broken
	// stream before Subscribe reconnects (nil for a stream the server ended
	// cleanly). It must not block.
	OnStreamError func(err error)
}

func (o SubscribeOptions) validate() error {
	var errs []error
	if o.Topic == "" {
		errs = append(errs, errors.New("topic is required"))
	}
	if o.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("max in flight %d is negative", o.MaxInFlight))
	}
	if o.MaxInFlight > 1<<20 {
		errs = append(errs, fmt.Errorf("max in flight %d is above %d", o.MaxInFlight, 1<<20))
	}
	if o.VisibilityTimeout < 0 {
		errs = append(errs, fmt.Errorf("visibility timeout %v is negative", o.VisibilityTimeout))
	}
	if o.VisibilityTimeout > 0 && o.VisibilityTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("visibility timeout %v is below 1ms", o.VisibilityTimeout))
	}
	if _, ok := sundialv1.AckMode_name[int32(o.AckMode)]; !ok {
		errs = append(errs, fmt.Errorf("unknown ack mode %d", o.AckMode))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}

// Delivery is one delivered message. Its fields are the server's Delivery;
// its methods answer the delivery over the subscription stream.
type Delivery struct {
	*sundialv1.Delivery

	c    *Client
	sub  *subscription // nil for a delivery from Receive
	sess *session      // nil for a delivery from Receive

	mu        sync.Mutex // guards completed
	completed bool
}

// Ack acknowledges the delivery: the group is done with the message. The
// error is the receipt's own outcome (a gRPC status error, e.g. for a
// receipt of an attempt that is no longer current) or the call's failure.
func (d *Delivery) Ack(ctx context.Context) error {
	d.complete()
	retried := false
	r, err := d.answerWith(ctx, func(ctx context.Context) ([]*sundialv1.ReceiptResult, error) {
		return d.sess.ack(ctx, d.Receipt)
	}, func(ctx context.Context) ([]*sundialv1.ReceiptResult, error) {
		retried = true
		return d.c.Ack(ctx, d.Receipt)
	})
	if err != nil {
		return err
	}
	if retried && codes.Code(r.GetError().GetCode()) == codes.NotFound {
		// The ack sent over the stream may have landed before the stream
		// broke: acks are idempotent, and nothing is in flight any more.
		return nil
	}
	return StatusError(r.GetError())
}

// Nack hands the delivery back for redelivery after delay (0: after the
// topic's exponential backoff for this attempt); reason is recorded for
// operators and on dead letters.
func (d *Delivery) Nack(ctx context.Context, delay time.Duration, reason string) error {
	d.complete()
	req := &sundialv1.NackRequest{Receipts: []string{d.Receipt}, DelayMs: delay.Milliseconds(), Reason: reason, RequestId: NewRequestID()}
	r, err := d.answer(ctx, &sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Nack{Nack: req}}, req.RequestId,
		func(ctx context.Context) ([]*sundialv1.ReceiptResult, error) {
			return d.c.Nack(ctx, delay, reason, d.Receipt)
		})
	if err != nil {
		return err
	}
	return StatusError(r.GetError())
}

// Extend pushes the lease deadline to now+dur (0: the visibility timeout)
// and returns the new deadline.
func (d *Delivery) Extend(ctx context.Context, dur time.Duration) (time.Time, error) {
	req := &sundialv1.ExtendRequest{Receipts: []string{d.Receipt}, ExtendMs: dur.Milliseconds(), RequestId: NewRequestID()}
	r, err := d.answer(ctx, &sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Extend{Extend: req}}, req.RequestId,
		func(ctx context.Context) ([]*sundialv1.ReceiptResult, error) {
			return d.c.Extend(ctx, dur, d.Receipt)
		})
	if err != nil {
		return time.Time{}, err
	}
	if err := StatusError(r.GetError()); err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(r.GetLeaseDeadlineUnixMs()), nil
}

// answer sends req over the delivery's stream and waits for its AckResult;
// once that stream is gone, or for a delivery from Receive, it uses the
// unary call instead.
func (d *Delivery) answer(ctx context.Context, req *sundialv1.SubscribeRequest, id string,
	unary func(context.Context) ([]*sundialv1.ReceiptResult, error)) (*sundialv1.ReceiptResult, error) {
	return d.answerWith(ctx, func(ctx context.Context) ([]*sundialv1.ReceiptResult, error) {
		return d.sess.request(ctx, req, id)
	}, unary)
}

// answerWith gets the delivery's result over the stream, or from unary
// once the stream is gone.
func (d *Delivery) answerWith(ctx context.Context, stream, unary func(context.Context) ([]*sundialv1.ReceiptResult, error)) (*sundialv1.ReceiptResult, error) {
	res, err := stream(ctx)
	if errors.Is(err, errSessionEnded) {
		var rs []*sundialv1.ReceiptResult
		rs, err = unary(ctx)
		if err == nil {
			res = rs
		}
	}
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		if r.GetReceipt() == d.Receipt || r.GetReceipt() == "" {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: no result for receipt %q", ErrShortResponse, d.Receipt)
}

// complete releases the delivery's slot (credit) once: on the first Ack or
// Nack, or when the handler returns.
func (d *Delivery) complete() {
	d.mu.Lock()
	done := d.completed
	d.completed = true
	d.mu.Unlock()
	if !done && d.sub != nil {
		d.sub.release()
	}
}

// subscription is the state of one Subscribe call across reconnects.
type subscription struct {
	c    *Client
	opts SubscribeOptions

	mu   sync.Mutex // guards busy and cur
	busy int        // deliveries received and not completed, over all sessions
	cur  *session   // the live session, nil between streams
	idle chan struct{}
}

// release frees one slot and grants one credit on the live stream.
func (s *subscription) release() {
	s.mu.Lock()
	s.busy--
	cur := s.cur
	if s.busy < s.opts.MaxInFlight {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	if cur != nil {
		cur.grant(1)
	}
}

// Subscribe consumes opts.Topic for opts.Group and runs handler for every
// delivery, up to opts.MaxInFlight at once, until ctx ends; it then waits
// for running handlers and returns nil. A broken stream is reopened with
// exponential backoff. Invalid options, and a server answer that
// apierr.Classify calls Permanent (InvalidArgument, NotFound,
// FailedPrecondition, PermissionDenied, Unauthenticated, Unimplemented,
// OutOfRange, AlreadyExists, ResourceExhausted without RetryInfo, ...), end
// Subscribe with that error; everything else reopens the stream.
//
// A delivery's slot is freed (and one credit granted) on its first Ack or
// Nack or when its handler returns, whichever is first. A handler that
// returns without acking leaves the message leased until its visibility
// timeout (at-least-once).
func (c *Client) Subscribe(ctx context.Context, opts SubscribeOptions, handler func(ctx context.Context, d *Delivery)) error {
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 64
	}
	if err := opts.validate(); err != nil {
		return err
	}
	if handler == nil {
		return fmt.Errorf("%w: handler is nil", ErrInvalidOptions)
	}
	sub := &subscription{c: c, opts: opts, idle: make(chan struct{}, 1)}
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for attempt := 0; ; {
		if ctx.Err() != nil {
			return nil
		}
		got, err := sub.run(ctx, handler, &handlers)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && permanent(err) {
			return err
		}
		if opts.OnStreamError != nil {
			opts.OnStreamError(err)
		}
		if got {
			attempt = 0
		}
		if !sleep(ctx, c.cfg.backoff.Delay(attempt)) {
			return nil
		}
		attempt++
	}
}

// permanent reports whether a stream error will not heal by reconnecting.
func permanent(err error) bool { return apierr.Classify(err) == apierr.Permanent }

// run opens one stream and serves it until it breaks. got reports whether
// any message arrived (to reset the backoff).
func (s *subscription) run(ctx context.Context, handler func(context.Context, *Delivery), handlers *sync.WaitGroup) (got bool, err error) {
	// Wait for a free slot: the new stream must start with positive credit.
	for {
		s.mu.Lock()
		free := s.opts.MaxInFlight - s.busy
		s.mu.Unlock()
		if free > 0 {
			break
		}
		select {
		case <-s.idle:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.c.consumer.Subscribe(sctx)
	if err != nil {
		return false, err
	}
	sess := &session{stream: stream, pending: make(map[string][]chan []*sundialv1.ReceiptResult)}

	// Start goes out before any credit: hold the send lock while the session
	// becomes current.
	sess.sendMu.Lock()
	s.mu.Lock()
	credit := s.opts.MaxInFlight - s.busy
	s.cur = sess
	s.mu.Unlock()
	startErr := stream.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{
		Topic:               s.opts.Topic,
		Group:               s.opts.Group,
		MaxInFlight:         int32(credit),
		VisibilityTimeoutMs: s.opts.VisibilityTimeout.Milliseconds(),
		AckMode:             s.opts.AckMode,
		// Deliveries ready together arrive in one frame; credit bounds how
		// many.
		MaxDeliveriesPerFrame: validate.MaxDeliveriesPerFrame,
		SendStarted:           s.opts.OnStarted != nil,
	}}})
	sess.sendMu.Unlock()

	defer func() {
		s.mu.Lock()
		if s.cur == sess {
			s.cur = nil
		}
		s.mu.Unlock()
		sess.end()
	}()
	if startErr != nil {
		_, err := stream.Recv() // the real reason is on the receive side
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return got, err
		}
		if r := resp.GetAckResult(); r != nil {
			sess.answer(r)
			continue
		}
		if resp.GetStarted() != nil {
			if s.opts.OnStarted != nil {
				s.opts.OnStarted()
			}
			continue
		}
		ds := frame.Deliveries(resp)
		if len(ds) == 0 {
			continue
		}
		got = true
		s.mu.Lock()
		s.busy += len(ds)
		s.mu.Unlock()
		handlers.Add(len(ds))
		for _, dl := range ds {
			d := &Delivery{Delivery: dl, c: s.c, sub: s, sess: sess}
			go func() {
				defer handlers.Done()
				defer d.complete()
				handler(ctx, d)
			}()
		}
	}
}

// session is one open Subscribe stream.
//
// Credit grants and acks coalesce: whoever finds no flush running becomes
// the flusher and sends everything queued meanwhile as one Credit and one
// Ack frame, until nothing is left. At a low rate every grant and ack goes
// out at once, alone; under load they share frames (and the proxy and
// broker handle one request for many receipts).
type session struct {
	stream interface {
		Send(*sundialv1.SubscribeRequest) error
	}
	sendMu sync.Mutex // serializes Send

	mu sync.Mutex // guards pending and ended
	// pending maps an ack/nack/extend request id to its waiters: one for
	// nacks and extends, every coalesced ack for an ack request.
	pending map[string][]chan []*sundialv1.ReceiptResult
	ended   bool

	qmu      sync.Mutex // guards the three below
	credit   int32      // credit granted and not sent yet
	acks     []queuedAck
	flushing bool
}

type queuedAck struct {
	receipt string
	result  chan []*sundialv1.ReceiptResult
}

func (s *session) send(req *sundialv1.SubscribeRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(req)
}

// request sends an ack, nack or extend and waits for its AckResult.
func (s *session) request(ctx context.Context, req *sundialv1.SubscribeRequest, id string) ([]*sundialv1.ReceiptResult, error) {
	if s == nil {
		return nil, errSessionEnded
	}
	ch := make(chan []*sundialv1.ReceiptResult, 1)
	s.post(req, id, []chan []*sundialv1.ReceiptResult{ch})
	return wait(ctx, ch)
}

// post registers waiters for the answer to request id and sends req; if
// the session has ended or the send fails, it closes them instead.
func (s *session) post(req *sundialv1.SubscribeRequest, id string, waiters []chan []*sundialv1.ReceiptResult) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		for _, ch := range waiters {
			close(ch)
		}
		return
	}
	s.pending[id] = waiters
	s.mu.Unlock()
	if err := s.send(req); err != nil {
		s.fail(id)
	}
}

// wait returns the results of a request, errSessionEnded if the stream
// ended first. An abandoned wait leaves its (buffered) channel to be
// answered or closed with the rest.
func wait(ctx context.Context, ch chan []*sundialv1.ReceiptResult) ([]*sundialv1.ReceiptResult, error) {
	select {
	case res, ok := <-ch:
		if !ok {
			return nil, errSessionEnded
		}
		return res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fail closes the waiters of request id, whose frame could not be sent.
func (s *session) fail(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.pending[id] {
		close(ch)
	}
	delete(s.pending, id)
}

// ack queues receipt for the next ack frame and waits for its results
// (the results of every receipt in that frame).
func (s *session) ack(ctx context.Context, receipt string) ([]*sundialv1.ReceiptResult, error) {
	if s == nil {
		return nil, errSessionEnded
	}
	ch := make(chan []*sundialv1.ReceiptResult, 1)
	s.qmu.Lock()
	s.acks = append(s.acks, queuedAck{receipt: receipt, result: ch})
	s.qmu.Unlock()
	s.flush()
	return wait(ctx, ch)
}

// grant queues n credit for the next credit frame.
func (s *session) grant(n int32) {
	s.qmu.Lock()
	s.credit += n
	s.qmu.Unlock()
	s.flush()
}

// flush sends what is queued unless another caller is already flushing
// (it will send this caller's part too).
func (s *session) flush() {
	s.qmu.Lock()
	if s.flushing {
		s.qmu.Unlock()
		return
	}
	s.flushing = true
	for {
		credit, acks := s.credit, s.acks
		s.credit, s.acks = 0, nil
		if credit == 0 && len(acks) == 0 {
			s.flushing = false
			s.qmu.Unlock()
			return
		}
		s.qmu.Unlock()
		if credit > 0 {
			// A failed send means the stream is gone: the reader ends the
			// session and a new one starts with fresh credit.
			_ = s.send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Credit{Credit: &sundialv1.Credit{N: credit}}})
		}
		if len(acks) > 0 {
			s.sendAcks(acks)
		}
		s.qmu.Lock()
	}
}

// sendAcks sends one ack frame for acks.
func (s *session) sendAcks(acks []queuedAck) {
	req := &sundialv1.AckRequest{RequestId: NewRequestID(), Receipts: make([]string, len(acks))}
	waiters := make([]chan []*sundialv1.ReceiptResult, len(acks))
	for i, a := range acks {
		req.Receipts[i], waiters[i] = a.receipt, a.result
	}
	s.post(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Ack{Ack: req}}, req.RequestId, waiters)
}

func (s *session) answer(r *sundialv1.AckResult) {
	s.mu.Lock()
	waiters := s.pending[r.GetRequestId()]
	delete(s.pending, r.GetRequestId())
	s.mu.Unlock()
	results := r.GetResults()
	for i, ch := range waiters {
		if len(waiters) > 1 && len(results) == len(waiters) {
			ch <- results[i : i+1] // results are in receipt order
			continue
		}
		ch <- results
	}
}

// end fails every pending request with errSessionEnded (their callers then
// use the unary calls).
func (s *session) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for id, waiters := range s.pending {
		for _, ch := range waiters {
			close(ch)
		}
		delete(s.pending, id)
	}
}
