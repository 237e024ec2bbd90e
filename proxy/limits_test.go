package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proto/validate"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// receipts makes n well-formed receipts on shard 1.
func receipts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = receipt.Receipt{Message: receipt.NewMessageID(1, uint64(i+1), 0), Group: "default", Attempt: 1}.String()
	}
	return out
}

func violationOn(err error, field string) bool {
	for _, v := range apierr.Violations(err) {
		if v.Field == field {
			return true
		}
	}
	return false
}

// An ack, nack or extend of more receipts than the limit is refused whole
// with InvalidArgument before any receipt reaches a shard; so is a request
// id over MaxRequestIDBytes, on publish too.
func TestOversizedRequestsAreRefusedBeforeAnythingIsApplied(t *testing.T) {
	_, leader, conn := startCluster(t)
	c := sundialv1.NewConsumerClient(conn)
	over := receipts(validate.DefaultLimits().MaxReceipts + 1)
	longID := strings.Repeat("r", validate.MaxRequestIDBytes+1)
	ctx := t.Context()
	checks := []struct {
		name, field string
		call        func() error
	}{
		{"ack", "receipts", func() error { _, err := c.Ack(ctx, &sundialv1.AckRequest{Receipts: over}); return err }},
		{"nack", "receipts", func() error { _, err := c.Nack(ctx, &sundialv1.NackRequest{Receipts: over}); return err }},
		{"extend", "receipts", func() error {
			_, err := c.Extend(ctx, &sundialv1.ExtendRequest{Receipts: over, ExtendMs: 1000})
			return err
		}},
		{"ack request_id", "request_id", func() error {
			_, err := c.Ack(ctx, &sundialv1.AckRequest{Receipts: receipts(1), RequestId: longID})
			return err
		}},
		{"publish request_id", "request_id", func() error {
			_, err := sundialv1.NewProducerClient(conn).Publish(ctx, &sundialv1.PublishRequest{RequestId: longID, Messages: []*sundialv1.Message{{Topic: "wide"}}})
			return err
		}},
	}
	for _, tc := range checks {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument || !violationOn(err, tc.field) {
			t.Errorf("%s: got %v, want InvalidArgument on %s", tc.name, err, tc.field)
		}
	}
	leader.mu.Lock()
	acked := len(leader.acked)
	leader.mu.Unlock()
	if acked != 0 {
		t.Errorf("refused acks applied %d receipts on the shard, want 0", acked)
	}
	// At the limit an ack goes through.
	resp, err := c.Ack(ctx, &sundialv1.AckRequest{Receipts: receipts(validate.DefaultLimits().MaxReceipts)})
	if err != nil || len(resp.GetResults()) != validate.DefaultLimits().MaxReceipts {
		t.Fatalf("Ack(at the limit) = %d results, %v", len(resp.GetResults()), err)
	}
}

// On a subscription an ack frame beyond the limits ends the stream with
// InvalidArgument and applies nothing.
func TestSubscribeAckFrameOverTheLimitIsRefused(t *testing.T) {
	_, leader, conn := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide"}}}); err != nil {
		t.Fatal(err)
	}
	over := receipts(validate.DefaultLimits().MaxReceipts + 1)
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Ack{Ack: &sundialv1.AckRequest{Receipts: over}}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || !violationOn(err, "ack.receipts") {
				t.Fatalf("stream ended with %v, want InvalidArgument on ack.receipts", err)
			}
			break
		}
		if r := resp.GetAckResult(); r != nil {
			t.Fatalf("an over-limit ack frame was answered with %d results", len(r.GetResults()))
		}
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	if len(leader.acked) != 0 {
		t.Errorf("refused ack frame applied %d receipts, want 0", len(leader.acked))
	}
}
