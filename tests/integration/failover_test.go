package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

func shardOf(t *testing.T, messageID string) uint64 {
	t.Helper()
	id, err := receipt.ParseMessageID(messageID)
	if err != nil {
		t.Fatalf("ParseMessageID(%q) error = %v", messageID, err)
	}
	return id.Shard()
}

// drain receives until every id in want arrived (acking each), or fails.
func drain(t *testing.T, c *Cluster, sub *Subscriber, want map[string]bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(want) > 0 {
		got, ok := sub.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("%d acknowledged messages never delivered (stream error %v)", len(want), sub.Err())
		}
		delete(want, got.MessageId)
		ack(t, c, got.Receipt)
		sub.Credit(1)
	}
}

func TestFailoverLosesNoAcknowledgedPublish(t *testing.T) {
	c := New(t, Config{})
	const topic = "orders"
	acked := map[string]bool{}
	first := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte("0")})
	acked[first[0].MessageId] = true
	shard := shardOf(t, first[0].MessageId)
	for i := 1; i < 100; i++ {
		acked[publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(strconv.Itoa(i))})[0].MessageId] = true
	}
	leader := c.LeaderOf(shard)
	c.StopBroker(leader)
	// Publishing goes on: the proxy retries until the shard has a new leader.
	for i := 100; i < 150; i++ {
		acked[publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(strconv.Itoa(i))})[0].MessageId] = true
	}
	if now := c.LeaderOf(shard); now == leader {
		t.Fatalf("shard %d still led by the stopped broker %d", shard, leader+1)
	}
	sub := c.Subscribe(topic, "", 50, 0)
	drain(t, c, sub, acked, 30*time.Second)
}

func TestLeasesSurviveFailover(t *testing.T) {
	c := New(t, Config{})
	const topic = "leases"
	var shard uint64
	for i := range 20 {
		res := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})
		shard = shardOf(t, res[0].MessageId)
	}
	sub := c.Subscribe(topic, "", 20, 30*time.Second)
	var receipts []string
	for range 20 {
		got, ok := sub.Next(10 * time.Second)
		if !ok {
			t.Fatalf("only %d of 20 delivered", len(receipts))
		}
		receipts = append(receipts, got.Receipt)
	}
	sub.Close()
	// Deliveries are pushed while their lease commits; wait for the commits
	// (a leader dying before them may deliver again, which at-least-once
	// allows) before failing over.
	Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		topic, err := c.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: topic})
		if err != nil {
			return err
		}
		for _, st := range topic.Stats {
			if st.Group == "default" && st.InFlight == 20 {
				return nil
			}
		}
		return fmt.Errorf("stats %v, want 20 in flight", topic.Stats)
	})
	c.StopBroker(c.LeaderOf(shard))
	c.WaitReady()

	// The new leader knows the leases: nothing is redelivered early...
	again := c.Subscribe(topic, "", 20, 30*time.Second)
	if got, ok := again.Next(2 * time.Second); ok {
		t.Fatalf("leased message redelivered right after failover: %v", got.Delivery)
	}
	// ...and the receipts handed out by the old leader still ack.
	for i, r := range ack(t, c, receipts...) {
		if r.Error != nil {
			t.Fatalf("ack of receipt %d after failover = %v, want success", i, r.Error)
		}
	}
}

func TestRestartKeepsPendingMessages(t *testing.T) {
	c := New(t, Config{})
	pending := map[string]bool{}
	for i := range 30 {
		res := publish(t, c, &sundialv1.Message{Topic: fmt.Sprintf("restart-%d", i%3), Payload: []byte("p"), DelayMs: 1500})
		pending[res[0].MessageId] = true
	}
	for i := range c.Nodes {
		c.StopBroker(i)
	}
	for i := range c.Nodes {
		c.StartBroker(i)
	}
	c.WaitReady()
	for i := range 3 {
		sub := c.Subscribe(fmt.Sprintf("restart-%d", i), "", 50, 0)
		got := 0
		for got < 10 {
			d, ok := sub.Next(15 * time.Second)
			if !ok {
				t.Fatalf("topic restart-%d: %d of 10 delivered after restart", i, got)
			}
			if !pending[d.MessageId] {
				t.Fatalf("unexpected delivery %v", d.Delivery)
			}
			delete(pending, d.MessageId)
			got++
		}
	}
	if len(pending) != 0 {
		t.Fatalf("%d messages lost across restart", len(pending))
	}
}
