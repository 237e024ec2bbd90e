package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// PublisherOptions tunes a Publisher. Zero fields take the defaults.
type PublisherOptions struct {
	// MaxBatchMessages sends a batch once it holds this many messages
	// (default 500).
	MaxBatchMessages int
	// MaxBatchBytes sends a batch before it would exceed this many encoded
	// bytes (default 3 MiB, under gRPC's 4 MiB message limit).
	MaxBatchBytes int
	// Linger is how long the first message of a batch waits for company
	// (default 2ms).
	Linger time.Duration
	// MaxInFlightBatches bounds the batches being published at once
	// (default 8). When all are busy, Publish blocks: that is the
	// backpressure.
	MaxInFlightBatches int
	// PublishTimeout bounds each batch, retries included; its futures fail
	// with DeadlineExceeded after it. Zero retries until Close gives up.
	PublishTimeout time.Duration
}

func (o PublisherOptions) withDefaults() PublisherOptions {
	if o.MaxBatchMessages <= 0 {
		o.MaxBatchMessages = 500
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 3 << 20
	}
	if o.Linger <= 0 {
		o.Linger = 2 * time.Millisecond
	}
	if o.MaxInFlightBatches <= 0 {
		o.MaxInFlightBatches = 8
	}
	return o
}

// PublishFuture is the pending result of one message given to a Publisher.
type PublishFuture struct {
	done chan struct{}
	res  *sundialv1.PublishResult
	err  error
}

func newFuture() *PublishFuture { return &PublishFuture{done: make(chan struct{})} }

func (f *PublishFuture) resolve(res *sundialv1.PublishResult, err error) {
	f.res, f.err = res, err
	if err == nil && res != nil {
		f.err = StatusError(res.GetError())
	}
	close(f.done)
}

// Done is closed once the result is known.
func (f *PublishFuture) Done() <-chan struct{} { return f.done }

// Wait blocks until the result is known or ctx ends. The error is the
// message's own failure (a gRPC status error), the batch's failure, or
// ctx's error.
func (f *PublishFuture) Wait(ctx context.Context) (*sundialv1.PublishResult, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Publisher publishes messages asynchronously in batches. It is safe for
// concurrent use. Create it with Client.NewPublisher and end it with Close.
//
// One goroutine (loop) owns the open batch; each sent batch runs in its own
// goroutine, at most MaxInFlightBatches at once.
type Publisher struct {
	c    *Client
	opts PublisherOptions

	ops     chan pubOp
	closing chan struct{} // closed when Close starts: wakes blocked Publish calls
	done    chan struct{} // closed when loop and every batch ended
	ctx     context.Context
	cancel  context.CancelFunc
	sem     chan struct{}

	mu     sync.RWMutex // guards closed; held (read) while sending on ops
	closed bool

	inflightMu sync.Mutex // guards inflight
	inflight   map[*batch]struct{}
	wg         sync.WaitGroup // batches in flight
	closeOnce  sync.Once
}

type pubOp struct {
	msg   *sundialv1.Message
	fut   *PublishFuture
	flush chan []chan struct{} // set for a flush: answers the batches to wait for
}

type batch struct {
	msgs  []*sundialv1.Message
	futs  []*PublishFuture
	bytes int
	done  chan struct{}
}

// NewPublisher starts a Publisher.
func (c *Client) NewPublisher(opts PublisherOptions) *Publisher {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		c:        c,
		opts:     opts,
		ops:      make(chan pubOp, opts.MaxBatchMessages),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		sem:      make(chan struct{}, opts.MaxInFlightBatches),
		inflight: make(map[*batch]struct{}),
	}
	go p.loop()
	return p
}

// Publish queues msg and returns its future. It blocks while
// MaxInFlightBatches batches are in flight and the queue is full. After
// Close the future fails with ErrPublisherClosed.
func (p *Publisher) Publish(msg *sundialv1.Message) *PublishFuture {
	f := newFuture()
	if !p.send(pubOp{msg: msg, fut: f}) {
		f.resolve(nil, ErrPublisherClosed)
	}
	return f
}

func (p *Publisher) send(op pubOp) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return false
	}
	select {
	case p.ops <- op:
		return true
	case <-p.closing:
		return false
	}
}

// Flush sends the open batch now and waits until every message queued
// before the call has its result, or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	reply := make(chan []chan struct{}, 1)
	if !p.send(pubOp{flush: reply}) {
		return ErrPublisherClosed
	}
	var waits []chan struct{}
	select {
	case waits = <-reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close stops accepting messages, sends what is queued and waits for every
// result. If ctx ends first, batches still in flight are cancelled (their
// futures fail) and Close returns ctx's error once they ended.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		close(p.closing)
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.ops) // no sender is left: closed is set under the write lock
	})
	select {
	case <-p.done:
		p.cancel()
		return nil
	case <-ctx.Done():
		p.cancel()
		<-p.done
		return ctx.Err()
	}
}

func (p *Publisher) loop() {
	defer close(p.done)
	var (
		cur   *batch
		timer *time.Timer
		tc    <-chan time.Time
	)
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer, tc = nil, nil
		}
	}
	dispatch := func() {
		stopTimer()
		if cur != nil && len(cur.msgs) > 0 {
			p.dispatch(cur)
		}
		cur = nil
	}
	for {
		select {
		case op, ok := <-p.ops:
			if !ok {
				dispatch()
				p.wg.Wait()
				return
			}
			if op.flush != nil {
				dispatch()
				op.flush <- p.inflightDone()
				continue
			}
			size := proto.Size(op.msg)
			if cur != nil && len(cur.msgs) > 0 && cur.bytes+size > p.opts.MaxBatchBytes {
				dispatch()
			}
			if cur == nil {
				cur = &batch{done: make(chan struct{})}
				timer = time.NewTimer(p.opts.Linger)
				tc = timer.C
			}
			cur.msgs = append(cur.msgs, op.msg)
			cur.futs = append(cur.futs, op.fut)
			cur.bytes += size
			if len(cur.msgs) >= p.opts.MaxBatchMessages {
				dispatch()
			}
		case <-tc:
			timer, tc = nil, nil
			dispatch()
		}
	}
}

func (p *Publisher) inflightDone() []chan struct{} {
	p.inflightMu.Lock()
	defer p.inflightMu.Unlock()
	out := make([]chan struct{}, 0, len(p.inflight))
	for b := range p.inflight {
		out = append(out, b.done)
	}
	return out
}

// dispatch waits for a free in-flight slot and publishes b in the
// background.
func (p *Publisher) dispatch(b *batch) {
	select {
	case p.sem <- struct{}{}:
	case <-p.ctx.Done():
		p.finish(b, nil, p.ctx.Err())
		return
	}
	p.inflightMu.Lock()
	p.inflight[b] = struct{}{}
	p.inflightMu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { <-p.sem }()
		ctx := p.ctx
		if p.opts.PublishTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.opts.PublishTimeout)
			defer cancel()
		}
		req := &sundialv1.PublishRequest{RequestId: NewRequestID(), Messages: b.msgs}
		res, err := p.c.publish(ctx, req)
		p.finish(b, res, err)
	}()
}

func (p *Publisher) finish(b *batch, res []*sundialv1.PublishResult, err error) {
	for i, f := range b.futs {
		switch {
		case i < len(res):
			f.resolve(res[i], nil)
		case err != nil:
			f.resolve(nil, err)
		default:
			f.resolve(nil, fmt.Errorf("%w: no result for message %d", ErrShortResponse, i))
		}
	}
	p.inflightMu.Lock()
	delete(p.inflight, b)
	p.inflightMu.Unlock()
	close(b.done)
}
