package integration

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestCancelAndRescheduleRetriedWithRequestID is chaos finding C through
// the proxy: a cancel (or reschedule) by key retried with its request id
// after a new message was published under the key answers the first
// attempt's outcome, naming the first message, and the new message is
// still delivered. The same id for another request is InvalidArgument.
func TestCancelAndRescheduleRetriedWithRequestID(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	ctx := ctx10(t)
	sel := func(key string) *sundialv1.MessageSelector {
		return &sundialv1.MessageSelector{Topic: "retried", By: &sundialv1.MessageSelector_Key{Key: key}}
	}
	keyed := func(key, payload string, delay time.Duration) *sundialv1.PublishResult {
		t.Helper()
		r := publish(t, c, &sundialv1.Message{Topic: "retried", Key: key, Payload: []byte(payload), DelayMs: delay.Milliseconds(),
			OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_REPLACE})[0]
		if r.KeyOutcome != sundialv1.KeyOutcome_KEY_OUTCOME_CREATED {
			t.Fatalf("Publish(%s, %s) = %v, want CREATED", key, payload, r)
		}
		return r
	}

	first := keyed("k-cancel", "cancelled", time.Hour)
	cancel := &sundialv1.CancelRequest{Message: sel("k-cancel"), RequestId: "cancel-1"}
	if got, err := c.Producer.Cancel(ctx, cancel); err != nil || got.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE || got.MessageId != first.MessageId {
		t.Fatalf("Cancel(cancel-1) = %v, %v, want DONE for %s", got, err, first.MessageId)
	}
	second := keyed("k-cancel", "kept", 0)
	if got, err := c.Producer.Cancel(ctx, cancel); err != nil || got.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE || got.MessageId != first.MessageId {
		t.Fatalf("retried Cancel(cancel-1) = %v, %v, want the first answer, DONE for %s (not the new %s)", got, err, first.MessageId, second.MessageId)
	}

	moved := keyed("k-resched", "moved", time.Hour)
	resched := &sundialv1.RescheduleRequest{Message: sel("k-resched"), DelayMs: 2 * time.Hour.Milliseconds(), RequestId: "resched-1"}
	rs, err := c.Producer.Reschedule(ctx, resched)
	if err != nil || rs.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE || rs.MessageId != moved.MessageId {
		t.Fatalf("Reschedule(resched-1) = %v, %v, want DONE for %s", rs, err, moved.MessageId)
	}
	if got, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: &sundialv1.MessageSelector{Topic: "retried", By: &sundialv1.MessageSelector_MessageId{MessageId: moved.MessageId}}}); err != nil || got.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Cancel(%s) = %v, %v, want DONE", moved.MessageId, got, err)
	}
	third := keyed("k-resched", "due now", 0)
	if got, err := c.Producer.Reschedule(ctx, resched); err != nil || got.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE || got.MessageId != moved.MessageId || got.DueAtUnixMs != rs.DueAtUnixMs {
		t.Fatalf("retried Reschedule(resched-1) = %v, %v, want the first answer %v (not a move of the new %s)", got, err, rs, third.MessageId)
	}

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"cancel of another key", func() error {
			_, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel("k-resched"), RequestId: "cancel-1"})
			return err
		}},
		{"reschedule with a cancel's id", func() error {
			_, err := c.Producer.Reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel("k-cancel"), DelayMs: 1000, RequestId: "cancel-1"})
			return err
		}},
		{"reschedule to another time", func() error {
			_, err := c.Producer.Reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel("k-resched"), DelayMs: 1000, RequestId: "resched-1"})
			return err
		}},
	} {
		if err := tc.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: error = %v, want InvalidArgument", tc.name, err)
		}
	}

	sub := c.Subscribe("retried", "", 10, 0)
	want := map[string]string{second.MessageId: "kept", third.MessageId: "due now"}
	for range 2 {
		got, ok := sub.Next(20 * time.Second)
		if !ok {
			t.Fatalf("deliveries: still waiting for %v (stream error %v)", want, sub.Err())
		}
		if p, ok := want[got.MessageId]; !ok || p != string(got.Payload) {
			t.Fatalf("delivery %s %q, want one of %v", got.MessageId, got.Payload, want)
		}
		delete(want, got.MessageId)
		ack(t, c, got.Receipt)
		sub.Credit(1)
	}
}
