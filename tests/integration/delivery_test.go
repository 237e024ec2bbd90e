package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func publish(t *testing.T, c *Cluster, msgs ...*sundialv1.Message) []*sundialv1.PublishResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := c.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: msgs})
	if err != nil {
		t.Fatalf("Publish() error = %v", err)
	}
	for i, r := range resp.Results {
		if r.Error != nil {
			t.Fatalf("Publish() result %d error = %v", i, r.Error)
		}
	}
	return resp.Results
}

func ack(t *testing.T, c *Cluster, receipts ...string) []*sundialv1.ReceiptResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := c.Consumer.Ack(ctx, &sundialv1.AckRequest{Receipts: receipts})
	if err != nil {
		t.Fatalf("Ack() error = %v", err)
	}
	return resp.Results
}

func TestDelayedDelivery(t *testing.T) {
	c := New(t, Config{})
	sub := c.Subscribe("reminders", "", 10, 0)
	res := publish(t, c, &sundialv1.Message{Topic: "reminders", Payload: []byte("hello"), DelayMs: 1000})
	if _, ok := sub.Next(700 * time.Millisecond); ok {
		t.Fatalf("a message due in 1s was delivered within 700ms")
	}
	got, ok := sub.Next(10 * time.Second)
	if !ok {
		t.Fatalf("message not delivered within 10s of its due time (stream error %v)", sub.Err())
	}
	if got.MessageId != res[0].MessageId || string(got.Payload) != "hello" || got.Attempt != 1 {
		t.Fatalf("delivery = %v, want id %s payload hello attempt 1", got.Delivery, res[0].MessageId)
	}
	if got.At.UnixMilli() < res[0].DueAtUnixMs {
		t.Fatalf("delivered at %d, before its due time %d", got.At.UnixMilli(), res[0].DueAtUnixMs)
	}
	if r := ack(t, c, got.Receipt); r[0].Error != nil {
		t.Fatalf("Ack() = %v, want success", r[0].Error)
	}
	if again, ok := sub.Next(1500 * time.Millisecond); ok {
		t.Fatalf("acked message delivered again: %v", again.Delivery)
	}
}

func TestRedeliveryAfterVisibilityTimeout(t *testing.T) {
	c := New(t, Config{})
	sub := c.Subscribe("jobs", "", 10, time.Second)
	publish(t, c, &sundialv1.Message{Topic: "jobs", Payload: []byte("work")})
	first, ok := sub.Next(10 * time.Second)
	if !ok || first.Attempt != 1 {
		t.Fatalf("first delivery = %v, %v, want attempt 1", first.Delivery, ok)
	}
	sub.Credit(1)
	second, ok := sub.Next(10 * time.Second)
	if !ok || second.Attempt != 2 || second.MessageId != first.MessageId {
		t.Fatalf("redelivery = %v, %v, want attempt 2 of %s", second.Delivery, ok, first.MessageId)
	}
	if lag := second.At.Sub(first.At); lag < 900*time.Millisecond {
		t.Fatalf("redelivered %v after the first delivery, before the 1s visibility timeout", lag)
	}
	// The first attempt's receipt is stale now; the second's acks.
	results := ack(t, c, first.Receipt, second.Receipt)
	if code := codes.Code(results[0].GetError().GetCode()); code != codes.FailedPrecondition {
		t.Fatalf("ack of attempt 1 = %v, want FailedPrecondition", results[0].GetError())
	}
	if results[1].Error != nil {
		t.Fatalf("ack of attempt 2 = %v, want success", results[1].Error)
	}
	if again := ack(t, c, second.Receipt); codes.Code(again[0].GetError().GetCode()) != codes.NotFound {
		t.Fatalf("second ack = %v, want NotFound", again[0].GetError())
	}
}

func TestNackWithDelay(t *testing.T) {
	c := New(t, Config{})
	sub := c.Subscribe("retries", "", 10, 0)
	publish(t, c, &sundialv1.Message{Topic: "retries", Payload: []byte("try")})
	first, ok := sub.Next(10 * time.Second)
	if !ok {
		t.Fatalf("no delivery")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Consumer.Nack(ctx, &sundialv1.NackRequest{Receipts: []string{first.Receipt}, DelayMs: 1000, Reason: "busy"})
	if err != nil || resp.Results[0].Error != nil {
		t.Fatalf("Nack() = %v, %v", resp, err)
	}
	nackedAt := time.Now()
	sub.Credit(1)
	second, ok := sub.Next(10 * time.Second)
	if !ok || second.Attempt != 2 {
		t.Fatalf("delivery after nack = %v, %v, want attempt 2", second.Delivery, ok)
	}
	if lag := second.At.Sub(nackedAt); lag < 900*time.Millisecond {
		t.Fatalf("nacked message back after %v, before its 1s delay", lag)
	}
}

func TestTopicsSpreadOverShards(t *testing.T) {
	c := New(t, Config{Shards: 4})
	const topics = 10
	sent := map[string]string{}
	for i := range topics {
		topic := fmt.Sprintf("topic-%d", i)
		res := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(topic)})
		sent[res[0].MessageId] = topic
	}
	shards := map[string]bool{}
	for id := range sent {
		shards[id[:8]] = true // the shard id leads the message id
	}
	if len(shards) < 2 {
		t.Fatalf("10 topics all landed on one shard")
	}
	for i := range topics {
		topic := fmt.Sprintf("topic-%d", i)
		sub := c.Subscribe(topic, "", 5, 0)
		got, ok := sub.Next(10 * time.Second)
		if !ok || sent[got.MessageId] != topic || string(got.Payload) != topic {
			t.Fatalf("topic %s delivered %v, %v", topic, got.Delivery, ok)
		}
	}
}
