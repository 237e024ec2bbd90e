// Package groups reproduces, on a process cluster, the ways a group could
// come to exist on a multi-partition topic and miss messages: named at the
// topic's creation, or made by its first Receive. Each must get every
// keyed message published after the call that created it answered,
// whichever shard the key lands on.
package groups

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

const partitions, messages = 8, 16

// On an RF 3 cluster of 8 shards, over the proxy: a group named in
// CreateTopic, and a group made by its first Receive, each receive all 16
// keyed messages published afterwards, spread over the topic's 8
// partitions (and so over several shards).
func TestNewGroupsGetEveryLaterMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an 8-shard process cluster")
	}
	c := framework.NewCluster(t, framework.Config{Shards: 8, LogLevel: "warn"})
	conn, err := grpc.NewClient(c.ProxyAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	admin, producer, consumer := sundialv1.NewAdminClient(conn), sundialv1.NewProducerClient(conn), sundialv1.NewConsumerClient(conn)
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("named at creation", func(t *testing.T) {
		if _, err := admin.CreateTopic(ctx(), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "named", Partitions: partitions, Groups: []string{"default", "g2"}}}); err != nil {
			t.Fatalf("CreateTopic(named, groups default g2) error = %v", err)
		}
		ids := publishKeyed(t, producer, "named")
		for _, g := range []string{"default", "g2"} {
			receiveAll(t, consumer, "named", g, ids)
		}
	})
	t.Run("first receive", func(t *testing.T) {
		if _, err := admin.CreateTopic(ctx(), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "later", Partitions: partitions}}); err != nil {
			t.Fatalf("CreateTopic(later) error = %v", err)
		}
		if resp, err := consumer.Receive(ctx(), &sundialv1.ReceiveRequest{Topic: "later", Group: "late", MaxMessages: 1}); err != nil || len(resp.GetDeliveries()) > 0 {
			t.Fatalf("first Receive(later, late) = %v, %v; want no deliveries", resp, err)
		}
		ids := publishKeyed(t, producer, "later")
		receiveAll(t, consumer, "later", "late", ids)
	})
	// A first Subscribe that asks for a started frame gets it first, once
	// the group is on every shard: what is published after it reaches the
	// group. (The stream ends before the publish, so Receive gets them all.)
	t.Run("first subscribe", func(t *testing.T) {
		if _, err := admin.CreateTopic(ctx(), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "subscribed", Partitions: partitions}}); err != nil {
			t.Fatalf("CreateTopic(subscribed) error = %v", err)
		}
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		stream, err := consumer.Subscribe(sctx)
		if err != nil {
			t.Fatal(err)
		}
		start := &sundialv1.Start{Topic: "subscribed", Group: "sub", MaxInFlight: 1, SendStarted: true}
		if err := stream.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: start}}); err != nil {
			t.Fatal(err)
		}
		first, err := stream.Recv()
		cancel()
		if err != nil || first.GetStarted().GetGroup() != "sub" || first.GetStarted().GetTopic() != "subscribed" {
			t.Fatalf("first Subscribe(subscribed, sub, send_started) first frame = %v, %v; want started of subscribed/sub", first, err)
		}
		ids := publishKeyed(t, producer, "subscribed")
		receiveAll(t, consumer, "subscribed", "sub", ids)
	})
	// The same through the Go SDK: OnStarted is called once the group is
	// in place.
	t.Run("first subscribe with the SDK", func(t *testing.T) {
		if _, err := admin.CreateTopic(ctx(), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "sdk", Partitions: partitions}}); err != nil {
			t.Fatalf("CreateTopic(sdk) error = %v", err)
		}
		cl, err := client.Dial(ctx(), c.ProxyAddrs())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- cl.Subscribe(sctx, client.SubscribeOptions{Topic: "sdk", Group: "sdk-group", MaxInFlight: 1,
				OnStarted: func() { cancel(); close(started) }},
				func(context.Context, *client.Delivery) { t.Error("a delivery before the publish") })
		}()
		select {
		case <-started:
		case <-sctx.Done():
		}
		if err := <-done; err != nil {
			t.Fatalf("Subscribe(sdk, sdk-group) = %v", err)
		}
		select {
		case <-started:
		default:
			t.Fatal("Subscribe(sdk, sdk-group, OnStarted) ended without calling OnStarted")
		}
		receiveAll(t, consumer, "sdk", "sdk-group", publishKeyed(t, producer, "sdk"))
	})
}

// publishKeyed publishes messages with keys k0, k1, ... to topic and
// answers their ids.
func publishKeyed(t *testing.T, p sundialv1.ProducerClient, topic string) []string {
	t.Helper()
	msgs := make([]*sundialv1.Message, messages)
	for i := range msgs {
		msgs[i] = &sundialv1.Message{Topic: topic, Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint(i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.Publish(ctx, &sundialv1.PublishRequest{Messages: msgs})
	if err != nil {
		t.Fatalf("Publish(%d to %s) error = %v", messages, topic, err)
	}
	var ids []string
	for i, r := range resp.GetResults() {
		if r.GetError() != nil {
			t.Fatalf("Publish(%s) result %d error = %v", topic, i, r.GetError())
		}
		ids = append(ids, r.GetMessageId())
	}
	return ids
}

// receiveAll receives (and acks) group of topic until it has every one of
// want, and fails naming how many came once 45s pass with none new (not a
// time bound: what is missing never comes).
func receiveAll(t *testing.T, c sundialv1.ConsumerClient, topic, group string, want []string) {
	t.Helper()
	got := map[string]bool{}
	deadline := time.Now().Add(45 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		resp, err := c.Receive(ctx, &sundialv1.ReceiveRequest{Topic: topic, Group: group, MaxMessages: messages, WaitMs: 1000})
		if err != nil {
			cancel()
			t.Fatalf("Receive(%s, %s) error = %v", topic, group, err)
		}
		var receipts []string
		for _, d := range resp.GetDeliveries() {
			if !slices.Contains(want, d.GetMessageId()) {
				t.Fatalf("group %s of %s received %s, not one of the messages published", group, topic, d.GetMessageId())
			}
			got[d.GetMessageId()] = true
			receipts = append(receipts, d.GetReceipt())
			deadline = time.Now().Add(45 * time.Second)
		}
		if len(receipts) > 0 {
			if _, err := c.Ack(ctx, &sundialv1.AckRequest{Receipts: receipts}); err != nil {
				cancel()
				t.Fatalf("Ack() error = %v", err)
			}
		}
		cancel()
	}
	if len(got) < len(want) {
		t.Fatalf("group %s of %s received %d of %d keyed messages over %d partitions", group, topic, len(got), len(want), partitions)
	}
}
