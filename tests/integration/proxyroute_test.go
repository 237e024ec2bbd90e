package integration

import (
	"fmt"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func wideMessages(topic string, n int) []*sundialv1.Message {
	out := make([]*sundialv1.Message, n)
	for i := range out {
		out[i] = &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))}
	}
	return out
}

// A subscription opened while the proxy's routing table does not list the
// topic yet must read every partition, not only partition 0.
func TestSubscribeBeforeTableKnowsTopicReadsAllPartitions(t *testing.T) {
	c, hold := newHeldCluster(t, Config{Brokers: 1, Shards: 4})
	ctx := ctx10(t)
	before := routingVersions(t, c)
	hold.Store(true)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "wide", Partitions: 8}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	sub := c.Subscribe("wide", "", 100, 0)
	hold.Store(false)
	waitProxyCaughtUp(t, c, before)
	// The proxy keeps a request's unkeyed messages in runs of at least 100
	// (proxy/internal/batch.MinPartMessages): 800 in one request are one
	// run on each of the 8 partitions.
	const n = 800
	publish(t, c, wideMessages("wide", n)...)
	seen := map[string]bool{}
	for len(seen) < n {
		got, ok := sub.Next(10 * time.Second)
		if !ok {
			t.Fatalf("received %d of %d messages spread over 8 partitions (stream error %v)", len(seen), n, sub.Err())
		}
		seen[got.MessageId] = true
		ack(t, c, got.Receipt)
		sub.Credit(1)
	}
}

// A subscription opened before its topic exists re-plans when the routing
// table learns the topic's partitions.
func TestSubscriptionReplansWhenTopicAppears(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 4})
	ctx := ctx10(t)
	sub := c.Subscribe("later", "", 100, 0)
	before := routingVersions(t, c)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "later", Partitions: 8}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	waitProxyCaughtUp(t, c, before)
	const n = 800 // one run of 100 on each of the 8 partitions
	publish(t, c, wideMessages("later", n)...)
	seen := map[string]bool{}
	for len(seen) < n {
		got, ok := sub.Next(10 * time.Second)
		if !ok {
			t.Fatalf("received %d of %d messages spread over 8 partitions (stream error %v)", len(seen), n, sub.Err())
		}
		seen[got.MessageId] = true
		ack(t, c, got.Receipt)
		sub.Credit(1)
	}
}

// Keyed publishes through a proxy whose table does not list the topic yet
// land on the key's partition, so IGNORE finds the first message.
func TestKeyedIgnoreBeforeTableKnowsTopic(t *testing.T) {
	c, hold := newHeldCluster(t, Config{Brokers: 1, Shards: 4})
	ctx := ctx10(t)
	before := routingVersions(t, c)
	hold.Store(true)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "keyed", Partitions: 8}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	keyed := func(round int) []*sundialv1.Message {
		var out []*sundialv1.Message
		for k := range 8 {
			out = append(out, &sundialv1.Message{Topic: "keyed", Key: fmt.Sprintf("order-%d", k), Payload: []byte(fmt.Sprint(round)), DelayMs: 3_600_000})
		}
		return out
	}
	first := publish(t, c, keyed(1)...)
	hold.Store(false)
	waitProxyCaughtUp(t, c, before)
	second := publish(t, c, keyed(2)...)
	for i := range second {
		if second[i].KeyOutcome != sundialv1.KeyOutcome_KEY_OUTCOME_IGNORED || second[i].MessageId != first[i].MessageId {
			t.Errorf("second publish of order-%d = %v %v, want IGNORED %v", i, second[i].KeyOutcome, second[i].MessageId, first[i].MessageId)
		}
	}
}
