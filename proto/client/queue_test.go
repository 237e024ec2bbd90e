package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// queueServer answers Cancel, Reschedule, Receive and the unary acks;
// the first failFirst calls of each kind answer Unavailable.
type queueServer struct {
	sundialv1.UnimplementedProducerServer
	sundialv1.UnimplementedConsumerServer

	failFirst int

	mu          sync.Mutex
	calls       map[string]int
	requestIDs  map[string][]string // of every cancel/reschedule attempt
	reschedules []*sundialv1.RescheduleRequest
	receives    []*sundialv1.ReceiveRequest
	acked       []string
	nacked      []string
}

func (q *queueServer) fail(op string) error { return q.failWithID(op, "") }

// failWithID is fail for a call that carries a request id, which it keeps.
func (q *queueServer) failWithID(op, requestID string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.calls == nil {
		q.calls, q.requestIDs = map[string]int{}, map[string][]string{}
	}
	q.calls[op]++
	q.requestIDs[op] = append(q.requestIDs[op], requestID)
	if q.calls[op] <= q.failFirst {
		return status.Error(codes.Unavailable, "try again")
	}
	return nil
}

func (q *queueServer) Cancel(_ context.Context, req *sundialv1.CancelRequest) (*sundialv1.CancelResponse, error) {
	if err := q.failWithID("cancel", req.GetRequestId()); err != nil {
		return nil, err
	}
	if req.GetMessage().GetKey() == "gone" {
		return &sundialv1.CancelResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND}, nil
	}
	return &sundialv1.CancelResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE, MessageId: "m-" + req.GetMessage().GetKey() + req.GetMessage().GetMessageId()}, nil
}

func (q *queueServer) Reschedule(_ context.Context, req *sundialv1.RescheduleRequest) (*sundialv1.RescheduleResponse, error) {
	if err := q.failWithID("reschedule", req.GetRequestId()); err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.reschedules = append(q.reschedules, req)
	q.mu.Unlock()
	return &sundialv1.RescheduleResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE, DueAtUnixMs: req.GetDeliverAtUnixMs()}, nil
}

func (q *queueServer) Receive(_ context.Context, req *sundialv1.ReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	if err := q.fail("receive"); err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.receives = append(q.receives, req)
	q.mu.Unlock()
	if req.GetTopic() == "denied" {
		return nil, status.Error(codes.PermissionDenied, "no")
	}
	out := &sundialv1.ReceiveResponse{}
	for i := range max(req.GetMaxMessages(), 1) {
		id := string('a' + i) // i is an int32, a rune: "a", "b", ...
		out.Deliveries = append(out.Deliveries, &sundialv1.Delivery{MessageId: id, Receipt: "r" + id, Topic: req.GetTopic()})
	}
	return out, nil
}

func (q *queueServer) Ack(_ context.Context, req *sundialv1.AckRequest) (*sundialv1.AckResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.acked = append(q.acked, req.GetReceipts()...)
	out := &sundialv1.AckResponse{}
	for _, r := range req.GetReceipts() {
		out.Results = append(out.Results, &sundialv1.ReceiptResult{Receipt: r})
	}
	return out, nil
}

func (q *queueServer) Nack(_ context.Context, req *sundialv1.NackRequest) (*sundialv1.NackResponse, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.nacked = append(q.nacked, req.GetReceipts()...)
	out := &sundialv1.NackResponse{}
	for _, r := range req.GetReceipts() {
		out.Results = append(out.Results, &sundialv1.ReceiptResult{Receipt: r, Error: status.New(codes.FailedPrecondition, "stale receipt").Proto()})
	}
	return out, nil
}

func serveQueue(t *testing.T, q *queueServer) *Client {
	return serve(t, func(s *grpc.Server) {
		sundialv1.RegisterProducerServer(s, q)
		sundialv1.RegisterConsumerServer(s, q)
	})
}

func TestCancelRetriesAndAnswersOutcome(t *testing.T) {
	q := &queueServer{failFirst: 2}
	c := serveQueue(t, q)
	ctx := testContext(t)
	resp, err := c.Cancel(ctx, ByKey("t", "k1"))
	if err != nil || resp.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE || resp.GetMessageId() != "m-k1" {
		t.Fatalf("Cancel(k1) = %v, %v, want DONE m-k1 after retries", resp, err)
	}
	resp, err = c.Cancel(ctx, ByID("t", "x"))
	if err != nil || resp.GetMessageId() != "m-x" {
		t.Errorf("Cancel(id x) = %v, %v, want m-x", resp, err)
	}
	resp, err = c.Cancel(ctx, ByKey("t", "gone"))
	if err != nil || resp.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND {
		t.Errorf("Cancel(gone) = %v, %v, want NOT_FOUND (an answer, not an error)", resp, err)
	}
}

// TestChangeRequestIDs: each Cancel/Reschedule call sends one request id
// to all its attempts (so the shard answers a retry with the first
// outcome), a new one per call, or the caller's with WithRequestID.
func TestChangeRequestIDs(t *testing.T) {
	q := &queueServer{failFirst: 2}
	c := serveQueue(t, q)
	ctx := testContext(t)
	if _, err := c.Cancel(ctx, ByKey("t", "k1")); err != nil {
		t.Fatalf("Cancel(k1) error = %v", err)
	}
	if _, err := c.Cancel(ctx, ByKey("t", "k2"), WithRequestID("mine-1")); err != nil {
		t.Fatalf("Cancel(k2, mine-1) error = %v", err)
	}
	if _, err := c.RescheduleIn(ctx, ByKey("t", "k1"), time.Minute); err != nil {
		t.Fatalf("RescheduleIn(k1) error = %v", err)
	}
	if _, err := c.RescheduleAt(ctx, ByKey("t", "k1"), time.UnixMilli(1893456000000), WithRequestID("mine-2")); err != nil {
		t.Fatalf("RescheduleAt(k1, mine-2) error = %v", err)
	}
	q.mu.Lock()
	cancels, reschedules := q.requestIDs["cancel"], q.requestIDs["reschedule"]
	q.mu.Unlock()
	// failFirst 2: the first call of each kind took three attempts.
	if len(cancels) != 4 || cancels[0] == "" || cancels[1] != cancels[0] || cancels[2] != cancels[0] || cancels[3] != "mine-1" {
		t.Errorf("cancel attempts carried request ids %q, want one new id on the 3 attempts of the first call, then mine-1", cancels)
	}
	if len(reschedules) != 4 || reschedules[0] == "" || reschedules[1] != reschedules[0] || reschedules[2] != reschedules[0] ||
		reschedules[0] == cancels[0] || reschedules[3] != "mine-2" {
		t.Errorf("reschedule attempts carried request ids %q, want one new id (not the cancel's) on the 3 attempts of the first call, then mine-2", reschedules)
	}
}

func TestReschedule(t *testing.T) {
	q := &queueServer{failFirst: 1}
	c := serveQueue(t, q)
	ctx := testContext(t)
	at := time.UnixMilli(1893456000000)
	resp, err := c.RescheduleAt(ctx, ByKey("t", "k"), at)
	if err != nil || resp.GetDueAtUnixMs() != at.UnixMilli() {
		t.Fatalf("RescheduleAt() = %v, %v", resp, err)
	}
	if _, err := c.RescheduleIn(ctx, ByKey("t", "k"), 90*time.Second); err != nil {
		t.Fatalf("RescheduleIn() = %v", err)
	}
	q.mu.Lock()
	got := q.reschedules
	q.mu.Unlock()
	if len(got) != 2 || got[0].GetDeliverAtUnixMs() != at.UnixMilli() || got[0].GetDelayMs() != 0 || got[1].GetDelayMs() != 90000 || got[1].GetDeliverAtUnixMs() != 0 {
		t.Errorf("server saw %v, want one absolute and one relative reschedule", got)
	}
	if _, err := c.RescheduleIn(ctx, ByKey("t", "k"), -time.Second); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("RescheduleIn(-1s) = %v, want ErrInvalidOptions", err)
	}
}

func TestReceive(t *testing.T) {
	q := &queueServer{failFirst: 1}
	c := serveQueue(t, q)
	ctx := testContext(t)
	ds, err := c.Receive(ctx, ReceiveOptions{Topic: "t", Group: "g", MaxMessages: 3, Wait: 2 * time.Second, VisibilityTimeout: 5 * time.Second})
	if err != nil || len(ds) != 3 {
		t.Fatalf("Receive() = %v, %v, want 3 deliveries after one retry", ds, err)
	}
	q.mu.Lock()
	req := q.receives[0]
	q.mu.Unlock()
	if req.GetGroup() != "g" || req.GetMaxMessages() != 3 || req.GetWaitMs() != 2000 || req.GetVisibilityTimeoutMs() != 5000 {
		t.Errorf("server saw %v, want the options", req)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Errorf("Ack() = %v", err)
	}
	if err := ds[1].Nack(ctx, time.Second, "busy"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Nack() = %v, want the receipt's FailedPrecondition", err)
	}
	q.mu.Lock()
	acked, nacked := q.acked, q.nacked
	q.mu.Unlock()
	if len(acked) != 1 || acked[0] != "ra" || len(nacked) != 1 || nacked[0] != "rb" {
		t.Errorf("acked %v nacked %v, want [ra] and [rb]", acked, nacked)
	}
	if _, err := c.Receive(ctx, ReceiveOptions{Topic: "denied"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Receive(denied) = %v, want PermissionDenied without retries", err)
	}
	for _, bad := range []ReceiveOptions{{}, {Topic: "t", MaxMessages: 1001}, {Topic: "t", Wait: 21 * time.Second}, {Topic: "t", AckMode: 9}} {
		if _, err := c.Receive(ctx, bad); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Receive(%+v) = %v, want ErrInvalidOptions", bad, err)
		}
	}
}
