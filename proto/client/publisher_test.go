package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// producer records every Publish call. Message ids echo the payload; a
// payload "bad" fails with InvalidArgument. The first failFirst calls fail
// with Unavailable; block, when set, holds calls until it is closed.
type producer struct {
	sundialv1.UnimplementedProducerServer

	failFirst int
	failWith  error // the error of the failed calls (default Unavailable)
	block     chan struct{}

	mu          sync.Mutex
	calls       int
	batches     []int    // messages per successful call
	requestIDs  []string // of every call
	active, max int      // concurrent calls
}

func (p *producer) Publish(ctx context.Context, req *sundialv1.PublishRequest) (*sundialv1.PublishResponse, error) {
	p.mu.Lock()
	p.calls++
	p.requestIDs = append(p.requestIDs, req.GetRequestId())
	fail := p.calls <= p.failFirst
	p.active++
	p.max = max(p.max, p.active)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.active--
		p.mu.Unlock()
	}()
	if fail && p.failWith != nil {
		return nil, p.failWith
	}
	if fail {
		return nil, status.Error(codes.Unavailable, "try again")
	}
	if p.block != nil {
		select {
		case <-p.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.mu.Lock()
	p.batches = append(p.batches, len(req.GetMessages()))
	p.mu.Unlock()
	resp := &sundialv1.PublishResponse{RequestId: req.GetRequestId()}
	for _, m := range req.GetMessages() {
		r := &sundialv1.PublishResult{MessageId: string(m.GetPayload()), DueAtUnixMs: m.GetDeliverAtUnixMs()}
		if string(m.GetPayload()) == "bad" {
			r = &sundialv1.PublishResult{Error: status.New(codes.InvalidArgument, "bad payload").Proto()}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (p *producer) snapshot() (batches []int, ids []string, maxActive int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches), slices.Clone(p.requestIDs), p.max
}

func serveProducer(t *testing.T, p *producer) *Client {
	return serve(t, func(s *grpc.Server) { sundialv1.RegisterProducerServer(s, p) })
}

func msgs(n int) []*sundialv1.Message {
	out := make([]*sundialv1.Message, n)
	for i := range out {
		out[i] = &sundialv1.Message{Topic: "t", Payload: []byte(fmt.Sprint(i))}
	}
	return out
}

func TestPublishRetriesWithSameRequestID(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failFirst int
		wantCalls int
	}{
		{"no failure", 0, 1},
		{"two unavailable", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &producer{failFirst: tc.failFirst}
			c := serveProducer(t, p)
			res, err := c.Publish(testContext(t), msgs(3)...)
			if err != nil {
				t.Fatalf("Publish(3 msgs) = %v, want nil", err)
			}
			if len(res) != 3 || res[2].GetMessageId() != "2" {
				t.Errorf("Publish(3 msgs) results = %v, want ids 0,1,2", res)
			}
			_, ids, _ := p.snapshot()
			if len(ids) != tc.wantCalls {
				t.Fatalf("Publish calls = %d, want %d", len(ids), tc.wantCalls)
			}
			for _, id := range ids {
				if id != ids[0] || id == "" {
					t.Errorf("request ids = %q, want one non-empty id repeated", ids)
					break
				}
			}
		})
	}
}

// TestPublishRetriesByClass: the SDK retries a publish (with its request
// id, so safely) on every error apierr.Classify does not call Permanent,
// and gives a Permanent one back at once.
func TestPublishRetriesByClass(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantCalls int
		wantCode  codes.Code
	}{
		{"internal", status.Error(codes.Internal, "proxy bug"), 3, codes.OK},
		{"attempt deadline", status.Error(codes.DeadlineExceeded, "attempt timed out"), 3, codes.OK},
		{"not leader", apierr.NotLeader(1, 2, "127.0.0.1:1"), 3, codes.OK},
		{"message over the size limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5242880 vs. 4194304)"), 1, codes.ResourceExhausted},
		{"invalid argument", apierr.InvalidArgument(apierr.FieldViolation{Field: "request_id", Description: "was used for other messages"}), 1, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &producer{failFirst: 2, failWith: tc.err}
			c := serveProducer(t, p)
			_, err := c.Publish(testContext(t), msgs(3)...)
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("Publish() = %v, want code %v", err, tc.wantCode)
			}
			if _, ids, _ := p.snapshot(); len(ids) != tc.wantCalls {
				t.Errorf("Publish calls = %d, want %d", len(ids), tc.wantCalls)
			}
		})
	}
}

func TestPublishGivesUpWhenContextEnds(t *testing.T) {
	p := &producer{failFirst: 1 << 30}
	c := serveProducer(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Publish(ctx, msgs(1)...)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Publish(always unavailable) = %v, want DeadlineExceeded", err)
	}
	if got := status.Code(err); got != codes.Unavailable && got != codes.DeadlineExceeded {
		t.Errorf("status.Code(Publish(always unavailable)) = %v, want Unavailable or DeadlineExceeded", got)
	}
}

func TestPublisherBatching(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    PublisherOptions
		n       int
		flush   bool // Flush instead of waiting for linger
		wantAll []int
	}{
		{"size cuts batches, flush sends the rest", PublisherOptions{MaxBatchMessages: 10, Linger: time.Hour}, 25, true, []int{10, 10, 5}},
		{"linger sends a small batch", PublisherOptions{MaxBatchMessages: 100, Linger: 20 * time.Millisecond}, 3, false, []int{3}},
		{"exact multiple", PublisherOptions{MaxBatchMessages: 5, Linger: time.Hour}, 10, true, []int{5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &producer{}
			c := serveProducer(t, p)
			ctx := testContext(t)
			pub := c.NewPublisher(tc.opts)
			defer pub.Close(ctx)
			var futs []*PublishFuture
			for _, m := range msgs(tc.n) {
				futs = append(futs, pub.Publish(m))
			}
			if tc.flush {
				if err := pub.Flush(ctx); err != nil {
					t.Fatalf("Flush() = %v, want nil", err)
				}
			}
			for i, f := range futs {
				res, err := f.Wait(ctx)
				if err != nil || res.GetMessageId() != fmt.Sprint(i) {
					t.Fatalf("future %d Wait() = %v, %v, want id %d, nil", i, res, err, i)
				}
			}
			got, _, _ := p.snapshot()
			slices.Sort(got)
			want := slices.Clone(tc.wantAll)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("batch sizes = %v, want %v", got, want)
			}
		})
	}
}

func TestPublisherRoutesPerMessageErrors(t *testing.T) {
	p := &producer{}
	c := serveProducer(t, p)
	ctx := testContext(t)
	pub := c.NewPublisher(PublisherOptions{})
	good := pub.Publish(&sundialv1.Message{Topic: "t", Payload: []byte("ok")})
	bad := pub.Publish(&sundialv1.Message{Topic: "t", Payload: []byte("bad")})
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if res, err := good.Wait(ctx); err != nil || res.GetMessageId() != "ok" {
		t.Errorf("good.Wait() = %v, %v, want id ok, nil", res, err)
	}
	if _, err := bad.Wait(ctx); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad.Wait() = %v, want InvalidArgument", err)
	}
	after := pub.Publish(&sundialv1.Message{Topic: "t"})
	if _, err := after.Wait(ctx); !errors.Is(err, ErrPublisherClosed) {
		t.Errorf("Publish after Close: Wait() = %v, want %v", err, ErrPublisherClosed)
	}
}

func TestPublisherBoundsBatchesInFlight(t *testing.T) {
	p := &producer{block: make(chan struct{})}
	c := serveProducer(t, p)
	ctx := testContext(t)
	pub := c.NewPublisher(PublisherOptions{MaxBatchMessages: 1, MaxInFlightBatches: 2})
	var futs []*PublishFuture
	go func() {
		time.Sleep(100 * time.Millisecond)
		close(p.block)
	}()
	for _, m := range msgs(6) {
		futs = append(futs, pub.Publish(m))
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("future %d Wait() = %v, want nil", i, err)
		}
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if _, _, got := p.snapshot(); got > 2 {
		t.Errorf("concurrent Publish calls = %d, want <= 2", got)
	}
}

func TestPublisherCloseCancelsWhenContextEnds(t *testing.T) {
	p := &producer{block: make(chan struct{})} // never released
	c := serveProducer(t, p)
	pub := c.NewPublisher(PublisherOptions{MaxBatchMessages: 1})
	f := pub.Publish(&sundialv1.Message{Topic: "t"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := pub.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close(short ctx) = %v, want DeadlineExceeded", err)
	}
	select {
	case <-f.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("future not resolved 5s after Close returned")
	}
	if _, err := f.Wait(context.Background()); err == nil {
		t.Errorf("Wait() after cancelled Close = nil, want an error")
	}
}
