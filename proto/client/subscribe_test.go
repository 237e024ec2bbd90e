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

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// consumer serves scripted Subscribe streams: stream i sends plan[i]
// deliveries (within the credit it holds), answers acks, and after
// breakAfterAcks[i] acks (or at once when -1) ends with Unavailable. The
// last stream stays open. startErr, when set, answers every Start.
type consumer struct {
	sundialv1.UnimplementedConsumerServer

	plan           []int
	breakAfterAcks []int
	startErr       error

	mu        sync.Mutex
	streams   int
	starts    []int32 // max_in_flight of each Start
	credits   []int32 // credit granted per stream
	acks      []int   // receipts acked over each stream
	ackFrames []int   // ack frames received on each stream
	unaryAcks []string
	next      int // message counter
	// failReceipt, when set, is answered NotFound.
	failReceipt string
}

func (c *consumer) Subscribe(stream grpc.BidiStreamingServer[sundialv1.SubscribeRequest, sundialv1.SubscribeResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	c.mu.Lock()
	i := c.streams
	c.streams++
	c.starts = append(c.starts, first.GetStart().GetMaxInFlight())
	c.credits = append(c.credits, first.GetStart().GetMaxInFlight())
	c.acks = append(c.acks, 0)
	c.ackFrames = append(c.ackFrames, 0)
	c.mu.Unlock()
	if first.GetStart() == nil {
		return status.Error(codes.InvalidArgument, "first frame must be start")
	}
	if c.startErr != nil {
		return c.startErr
	}
	last := i >= len(c.plan)-1
	toSend := 0
	breakAt := 0
	if i < len(c.plan) {
		toSend = c.plan[i]
		breakAt = c.breakAfterAcks[i]
	}
	if !last && breakAt < 0 {
		for ; toSend > 0; toSend-- {
			if err := stream.Send(c.delivery()); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "broken on purpose")
	}
	sent := 0
	for sent < toSend && sent < int(first.GetStart().GetMaxInFlight()) {
		if err := stream.Send(c.delivery()); err != nil {
			return err
		}
		sent++
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		c.mu.Lock()
		switch k := req.GetKind().(type) {
		case *sundialv1.SubscribeRequest_Credit:
			c.credits[i] += k.Credit.GetN()
		case *sundialv1.SubscribeRequest_Ack:
			c.acks[i] += len(k.Ack.GetReceipts())
			c.ackFrames[i]++
		}
		acks := c.acks[i]
		fail := c.failReceipt
		c.mu.Unlock()
		if ack := req.GetAck(); ack != nil {
			res := &sundialv1.AckResult{Op: sundialv1.AckResult_OP_ACK, RequestId: ack.GetRequestId()}
			for _, r := range ack.GetReceipts() {
				rr := &sundialv1.ReceiptResult{Receipt: r}
				if r == fail {
					rr.Error = status.New(codes.NotFound, "already acked").Proto()
				}
				res.Results = append(res.Results, rr)
			}
			if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_AckResult{AckResult: res}}); err != nil {
				return err
			}
			if !last && acks >= breakAt {
				return status.Error(codes.Unavailable, "broken on purpose")
			}
		}
		for n := req.GetCredit().GetN(); n > 0 && sent < toSend; n-- {
			if err := stream.Send(c.delivery()); err != nil {
				return err
			}
			sent++
		}
	}
}

func (c *consumer) delivery() *sundialv1.SubscribeResponse {
	c.mu.Lock()
	n := c.next
	c.next++
	c.mu.Unlock()
	return &sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Delivery{Delivery: &sundialv1.Delivery{
		MessageId: fmt.Sprint(n), Receipt: fmt.Sprintf("r%d", n), Topic: "t", Attempt: 1,
	}}}
}

func (c *consumer) Ack(_ context.Context, req *sundialv1.AckRequest) (*sundialv1.AckResponse, error) {
	c.mu.Lock()
	c.unaryAcks = append(c.unaryAcks, req.GetReceipts()...)
	c.mu.Unlock()
	resp := &sundialv1.AckResponse{}
	for _, r := range req.GetReceipts() {
		resp.Results = append(resp.Results, &sundialv1.ReceiptResult{Receipt: r})
	}
	return resp, nil
}

func serveConsumer(t *testing.T, c *consumer) *Client {
	return serve(t, func(s *grpc.Server) { sundialv1.RegisterConsumerServer(s, c) })
}

func TestSubscribeReconnectsAndGrantsCredit(t *testing.T) {
	srv := &consumer{plan: []int{6, 2}, breakAfterAcks: []int{6, 0}}
	c := serveConsumer(t, srv)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var (
		mu   sync.Mutex
		seen []string
	)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, SubscribeOptions{Topic: "t", MaxInFlight: 4}, func(ctx context.Context, d *Delivery) {
			if err := d.Ack(ctx); err != nil {
				t.Errorf("Ack(%s) = %v, want nil", d.Receipt, err)
			}
			mu.Lock()
			seen = append(seen, d.MessageId)
			if len(seen) == 8 {
				cancel()
			}
			mu.Unlock()
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Subscribe() = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe did not return within 10s")
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.streams != 2 {
		t.Errorf("streams opened = %d, want 2", srv.streams)
	}
	if want := []int32{4, 4}; !slices.Equal(srv.starts, want) {
		t.Errorf("Start max_in_flight per stream = %v, want %v", srv.starts, want)
	}
	// Stream 1 starts with 4 and gets one credit per acked delivery: 4+6.
	if len(srv.credits) > 0 && srv.credits[0] != 10 {
		t.Errorf("stream 1 credit = %d, want 10 (4 at start + 6 acks)", srv.credits[0])
	}
	if len(seen) != 8 {
		t.Errorf("deliveries handled = %d, want 8", len(seen))
	}
}

func TestSubscribeAckFallsBackToUnary(t *testing.T) {
	srv := &consumer{plan: []int{1, 0}, breakAfterAcks: []int{-1, 0}}
	c := serveConsumer(t, srv)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	acked := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, SubscribeOptions{Topic: "t"}, func(ctx context.Context, d *Delivery) {
			// Wait until the stream is replaced, then ack.
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				srv.mu.Lock()
				n := srv.streams
				srv.mu.Unlock()
				if n >= 2 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			acked <- d.Ack(ctx)
			cancel()
		})
	}()
	select {
	case err := <-acked:
		if err != nil {
			t.Errorf("Ack after stream break = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no ack within 10s")
	}
	if err := <-done; err != nil {
		t.Errorf("Subscribe = %v, want nil after ctx ends", err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !slices.Equal(srv.unaryAcks, []string{"r0"}) {
		t.Errorf("unary acks = %v, want [r0]", srv.unaryAcks)
	}
}

func TestSubscribeStopsOnPermanentErrors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        SubscribeOptions
		startErr    error
		wantCode    codes.Code
		wantInvalid bool
		wantStreams int
	}{
		{"no topic", SubscribeOptions{}, nil, codes.Unknown, true, 0},
		{"negative max in flight", SubscribeOptions{Topic: "t", MaxInFlight: -1}, nil, codes.Unknown, true, 0},
		{"negative visibility", SubscribeOptions{Topic: "t", VisibilityTimeout: -time.Second}, nil, codes.Unknown, true, 0},
		{"server invalid argument", SubscribeOptions{Topic: "t"}, status.Error(codes.InvalidArgument, "topic: no such topic"), codes.InvalidArgument, false, 1},
		{"server not found", SubscribeOptions{Topic: "t"}, status.Error(codes.NotFound, "topic t"), codes.NotFound, false, 1},
		{"server resource exhausted", SubscribeOptions{Topic: "t"}, status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5242880 vs. 4194304)"), codes.ResourceExhausted, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &consumer{startErr: tc.startErr}
			c := serveConsumer(t, srv)
			err := c.Subscribe(testContext(t), tc.opts, func(context.Context, *Delivery) {})
			if tc.wantInvalid && !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("Subscribe(%+v) = %v, want %v", tc.opts, err, ErrInvalidOptions)
			}
			if !tc.wantInvalid && status.Code(err) != tc.wantCode {
				t.Errorf("Subscribe(%+v) = %v, want code %v", tc.opts, err, tc.wantCode)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if srv.streams != tc.wantStreams {
				t.Errorf("streams opened = %d, want %d", srv.streams, tc.wantStreams)
			}
		})
	}
}

func TestSubscribeCoalescesAcksAndCredit(t *testing.T) {
	const n = 400
	srv := &consumer{plan: []int{n}, breakAfterAcks: []int{0}, failReceipt: "r7"}
	c := serveConsumer(t, srv)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var (
		mu   sync.Mutex
		errs = map[string]error{}
	)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, SubscribeOptions{Topic: "t", MaxInFlight: 64}, func(ctx context.Context, d *Delivery) {
			err := d.Ack(ctx)
			mu.Lock()
			errs[d.Receipt] = err
			if len(errs) == n {
				cancel()
			}
			mu.Unlock()
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Subscribe = %v, want nil after ctx ends", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Subscribe did not finish within 20s")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != n {
		t.Fatalf("acked %d deliveries, want %d", len(errs), n)
	}
	// Each ack gets its own receipt's result, whatever frame carried it.
	for r, err := range errs {
		if r == "r7" {
			if status.Code(err) != codes.NotFound {
				t.Errorf("Ack(r7) = %v, want NotFound", err)
			}
		} else if err != nil {
			t.Errorf("Ack(%s) = %v, want nil", r, err)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.acks[0] != n {
		t.Errorf("receipts acked over the stream = %d, want %d", srv.acks[0], n)
	}
	if srv.credits[0] != 64+n {
		t.Errorf("credit granted = %d, want %d (64 at start + one per delivery)", srv.credits[0], 64+n)
	}
	t.Logf("%d acks in %d frames", srv.acks[0], srv.ackFrames[0])
}

// batchConsumer answers a Start with one Deliveries frame of batch
// deliveries, then a single Delivery frame, and counts the credit and
// acked receipts it gets back.
type batchConsumer struct {
	sundialv1.UnimplementedConsumerServer
	batch int

	mu       sync.Mutex
	perFrame int32 // the Start's max_deliveries_per_frame
	credit   int32 // granted after the Start
	acked    []string
}

func (c *batchConsumer) Subscribe(stream grpc.BidiStreamingServer[sundialv1.SubscribeRequest, sundialv1.SubscribeResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.perFrame = first.GetStart().GetMaxDeliveriesPerFrame()
	c.mu.Unlock()
	ds := make([]*sundialv1.Delivery, c.batch+1)
	for i := range ds {
		ds[i] = &sundialv1.Delivery{MessageId: fmt.Sprint(i), Receipt: fmt.Sprintf("r%d", i), Topic: "t", Attempt: 1}
	}
	if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Deliveries{Deliveries: &sundialv1.Deliveries{Deliveries: ds[:c.batch]}}}); err != nil {
		return err
	}
	if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Delivery{Delivery: ds[c.batch]}}); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.credit += req.GetCredit().GetN()
		c.acked = append(c.acked, req.GetAck().GetReceipts()...)
		c.mu.Unlock()
		if ack := req.GetAck(); ack != nil {
			res := &sundialv1.AckResult{Op: sundialv1.AckResult_OP_ACK, RequestId: ack.GetRequestId()}
			for _, r := range ack.GetReceipts() {
				res.Results = append(res.Results, &sundialv1.ReceiptResult{Receipt: r})
			}
			if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_AckResult{AckResult: res}}); err != nil {
				return err
			}
		}
	}
}

func TestSubscribeUnpacksBatchedFrames(t *testing.T) {
	const batch = 5
	srv := &batchConsumer{batch: batch}
	c := serve(t, func(s *grpc.Server) { sundialv1.RegisterConsumerServer(s, srv) })
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, SubscribeOptions{Topic: "t", MaxInFlight: 10}, func(ctx context.Context, d *Delivery) {
			if err := d.Ack(ctx); err != nil {
				t.Errorf("Ack(%s) = %v, want nil", d.Receipt, err)
			}
			mu.Lock()
			seen[d.MessageId]++
			mu.Unlock()
		})
	}()
	// Every delivery handled and acked once: the acks and their credit
	// reach the server, and every handler's Ack has had its answer (ctx
	// ends only then, or an Ack still waiting for its result would end
	// with it).
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv.mu.Lock()
		acked, credit := len(srv.acked), srv.credit
		srv.mu.Unlock()
		mu.Lock()
		handled := len(seen)
		mu.Unlock()
		if acked == batch+1 && credit == batch+1 && handled == batch+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d receipts acked, %d credit granted and %d handlers done, want %d of each", acked, credit, handled, batch+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Subscribe = %v, want nil after ctx ends", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range batch + 1 {
		if n := seen[fmt.Sprint(i)]; n != 1 {
			t.Errorf("delivery %d handled %d times, want once", i, n)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.perFrame <= 1 {
		t.Errorf("Start max_deliveries_per_frame = %d, want the SDK to ask for batches", srv.perFrame)
	}
	if srv.credit != batch+1 {
		t.Errorf("credit granted = %d, want exactly %d, one per delivery", srv.credit, batch+1)
	}
}
