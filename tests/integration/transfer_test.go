package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// After a leadership transfer the new leader honours what the old one
// answered: an acked message is not redelivered, a message under a valid
// lease is not redelivered before it runs out, a cancel answered DONE
// keeps its message from ever being delivered, and deliveries go on.
func TestLeaderTransferHonoursAnswers(t *testing.T) {
	c := New(t, Config{Shards: 1})
	const topic = "jobs"
	sub := c.Subscribe(topic, "", 10, 0)
	acked := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte("acked")})[0].MessageId
	leased := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte("leased")})[0].MessageId
	for range 2 {
		got, ok := sub.Next(15 * time.Second)
		if !ok {
			t.Fatalf("delivery before the transfer missing (stream error %v)", sub.Err())
		}
		if got.MessageId == acked {
			if r := ack(t, c, got.Receipt); r[0].Error != nil {
				t.Fatalf("ack = %v", r[0].Error)
			}
		}
	}
	publish(t, c, &sundialv1.Message{Topic: topic, Key: "cancel-me", Payload: []byte("cancelled"), DelayMs: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: "cancel-me"}}})
	if err != nil || resp.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Cancel() = %v, %v, want DONE", resp, err)
	}
	after := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte("after"), DelayMs: 1000})[0].MessageId
	shard := shardOf(t, after)

	from := c.LeaderOf(shard)
	to := (from + 1) % len(c.Nodes)
	Eventually(t, 20*time.Second, func() error {
		now := c.LeaderOf(shard)
		if now == to {
			return nil
		}
		// Dragonboat ignores a transfer to a replica that is behind: ask
		// again until it moves.
		if err := c.Nodes[now].Server.TransferLeadership(t.Context(), shard, uint64(to+1)); err != nil {
			return err
		}
		return fmt.Errorf("shard %d led by broker %d, want %d", shard, now+1, to+1)
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, ok := sub.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("message published before the transfer never delivered after it (stream error %v)", sub.Err())
		}
		switch got.MessageId {
		case acked:
			t.Fatalf("acked message redelivered after the transfer (attempt %d)", got.Attempt)
		case leased:
			t.Fatalf("message under a 30s lease redelivered after the transfer (attempt %d)", got.Attempt)
		}
		if string(got.Payload) == "cancelled" {
			t.Fatalf("message cancelled with DONE delivered after the transfer")
		}
		if got.MessageId == after {
			ack(t, c, got.Receipt)
			break
		}
	}
	// Anything else would arrive by now: the cancelled message was due
	// with the one just delivered.
	if got, ok := sub.Next(time.Second); ok {
		t.Fatalf("unexpected delivery after the transfer: %s attempt %d %q", got.MessageId, got.Attempt, got.Payload)
	}
}
