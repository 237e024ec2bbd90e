package integration

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Received is one delivery and when the test saw it.
type Received struct {
	*sundialv1.Delivery
	At time.Time
}

// Subscriber is a raw Subscribe stream through the proxy that records every
// delivery and the frames they came in. It grants no credit by itself:
// tests call Credit.
type Subscriber struct {
	t      testing.TB
	stream sundialv1.Consumer_SubscribeClient
	cancel context.CancelFunc

	mu      sync.Mutex
	got     []Received
	frames  []int // deliveries per delivery-carrying frame; 0 for a single Delivery frame
	results map[string]*sundialv1.AckResult
	err     error
	signal  chan struct{}
}

// Subscribe opens a stream on topic/group with credit and an optional
// visibility timeout.
func (c *Cluster) Subscribe(topic, group string, credit int32, visibility time.Duration) *Subscriber {
	c.t.Helper()
	return c.SubscribeStart(&sundialv1.Start{Topic: topic, Group: group, MaxInFlight: credit, VisibilityTimeoutMs: visibility.Milliseconds()})
}

// SubscribeStart opens a stream with start as its first frame.
func (c *Cluster) SubscribeStart(start *sundialv1.Start) *Subscriber {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.Consumer.Subscribe(ctx)
	if err != nil {
		cancel()
		c.t.Fatalf("Subscribe() error = %v", err)
	}
	if err := stream.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: start}}); err != nil {
		cancel()
		c.t.Fatalf("send start: %v", err)
	}
	s := &Subscriber{t: c.t, stream: stream, cancel: cancel, results: map[string]*sundialv1.AckResult{}, signal: make(chan struct{}, 1)}
	go s.recv()
	c.t.Cleanup(s.Close)
	return s
}

func (s *Subscriber) recv() {
	for {
		resp, err := s.stream.Recv()
		s.mu.Lock()
		if err != nil {
			s.err = err
			s.mu.Unlock()
			s.poke()
			return
		}
		switch k := resp.Kind.(type) {
		case *sundialv1.SubscribeResponse_Delivery:
			s.got = append(s.got, Received{Delivery: k.Delivery, At: time.Now()})
			s.frames = append(s.frames, 0)
		case *sundialv1.SubscribeResponse_Deliveries:
			at := time.Now()
			for _, d := range k.Deliveries.GetDeliveries() {
				s.got = append(s.got, Received{Delivery: d, At: at})
			}
			s.frames = append(s.frames, len(k.Deliveries.GetDeliveries()))
		case *sundialv1.SubscribeResponse_AckResult:
			s.results[k.AckResult.RequestId] = k.AckResult
		}
		s.mu.Unlock()
		s.poke()
	}
}

func (s *Subscriber) poke() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// Next waits up to timeout for the next delivery; ok is false on timeout.
func (s *Subscriber) Next(timeout time.Duration) (Received, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if len(s.got) > 0 {
			r := s.got[0]
			s.got = s.got[1:]
			s.mu.Unlock()
			return r, true
		}
		s.mu.Unlock()
		select {
		case <-s.signal:
		case <-deadline.C:
			return Received{}, false
		}
	}
}

// Credit grants n more deliveries.
func (s *Subscriber) Credit(n int32) {
	s.t.Helper()
	if err := s.stream.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Credit{Credit: &sundialv1.Credit{N: n}}}); err != nil {
		s.t.Fatalf("send credit: %v", err)
	}
}

// Frames is how many deliveries each frame so far carried: 0 for a single
// Delivery frame, n for a Deliveries frame of n.
func (s *Subscriber) Frames() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.frames)
}

// Err is the stream's terminal error, if it ended.
func (s *Subscriber) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the stream.
func (s *Subscriber) Close() { s.cancel() }
