package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

func TestPullReceive(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "pull", Partitions: 2}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	empty, err := c.Consumer.Receive(ctx, &sundialv1.ReceiveRequest{Topic: "pull", MaxMessages: 5, WaitMs: 200})
	if err != nil || len(empty.Deliveries) != 0 {
		t.Fatalf("Receive(empty topic) = %v, %v, want nothing after the wait", empty, err)
	}
	for i := range 8 {
		publish(t, c, &sundialv1.Message{Topic: "pull", Payload: []byte(fmt.Sprint(i)), Key: fmt.Sprint("k", i)})
	}
	got := map[string]bool{}
	for len(got) < 8 {
		resp, err := c.Consumer.Receive(ctx, &sundialv1.ReceiveRequest{Topic: "pull", MaxMessages: 3, WaitMs: 2000})
		if err != nil {
			t.Fatalf("Receive() error = %v", err)
		}
		if len(resp.Deliveries) == 0 || len(resp.Deliveries) > 3 {
			t.Fatalf("Receive(max 3) answered %d deliveries", len(resp.Deliveries))
		}
		for _, d := range resp.Deliveries {
			got[d.MessageId] = true
			ack(t, c, d.Receipt)
		}
	}
	// A long poll returns as soon as a message becomes due: due in 300 ms,
	// it must come well before the longest wait (20 s) ends; a busy machine
	// does not take 15 s of it, a poll that only looks again at the end
	// of its wait takes all of it.
	publish(t, c, &sundialv1.Message{Topic: "pull", Payload: []byte("late"), DelayMs: 300})
	start := time.Now()
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	resp, err := c.Consumer.Receive(wctx, &sundialv1.ReceiveRequest{Topic: "pull", MaxMessages: 10, WaitMs: validate.MaxReceiveWait.Milliseconds()})
	if err != nil || len(resp.Deliveries) != 1 || time.Since(start) > 15*time.Second {
		t.Fatalf("long poll = %v, %v after %v, want the late message well before the 20s wait", resp, err, time.Since(start))
	}
}

func TestAtMostOnceSubscription(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	publish(t, c, &sundialv1.Message{Topic: "amo", Payload: []byte("once")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.Consumer.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe() error = %v", err)
	}
	if err := stream.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "amo", MaxInFlight: 5, VisibilityTimeoutMs: 1000, AckMode: sundialv1.AckMode_ACK_MODE_AT_MOST_ONCE}}}); err != nil {
		t.Fatalf("Send(Start) error = %v", err)
	}
	first, err := stream.Recv()
	if err != nil || string(first.GetDelivery().GetPayload()) != "once" {
		t.Fatalf("Recv() = %v, %v", first, err)
	}
	// Never acked, yet never redelivered: the delivery removed it.
	sub := c.Subscribe("amo", "", 5, time.Second)
	if d, ok := sub.Next(2500 * time.Millisecond); ok {
		t.Fatalf("at-most-once message delivered again: %v", d.Delivery)
	}
}

func TestPriorityOrdersSameInstant(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	at := time.Now().Add(500 * time.Millisecond).UnixMilli()
	publish(t, c,
		&sundialv1.Message{Topic: "prio", Payload: []byte("low"), DeliverAtUnixMs: at, Priority: 9},
		&sundialv1.Message{Topic: "prio", Payload: []byte("high"), DeliverAtUnixMs: at, Priority: -3},
		&sundialv1.Message{Topic: "prio", Payload: []byte("mid"), DeliverAtUnixMs: at, Priority: 0},
	)
	sub := c.Subscribe("prio", "", 1, 0)
	var order []string
	for _, d := range collect(t, c, sub, 3, false) {
		order = append(order, string(d.Payload))
	}
	if fmt.Sprint(order) != "[high mid low]" {
		t.Fatalf("delivery order %v, want [high mid low]", order)
	}
}

func TestCancelRacingDelivery(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	const n = 50
	due := time.Now().Add(300 * time.Millisecond).UnixMilli()
	for i := range n {
		publish(t, c, &sundialv1.Message{Topic: "race", Key: fmt.Sprint("r", i), Payload: []byte(fmt.Sprint(i)), DeliverAtUnixMs: due})
	}
	sub := c.Subscribe("race", "", n, 0)
	time.Sleep(time.Until(time.UnixMilli(due)))
	outcome := map[string]sundialv1.ChangeOutcome{}
	for i := range n {
		resp, err := c.Producer.Cancel(ctx10(t), &sundialv1.CancelRequest{Message: &sundialv1.MessageSelector{Topic: "race", By: &sundialv1.MessageSelector_Key{Key: fmt.Sprint("r", i)}}})
		if err != nil {
			t.Fatalf("Cancel() error = %v", err)
		}
		outcome[fmt.Sprint(i)] = resp.Outcome
	}
	// Every IN_FLIGHT message must arrive (its delivery had begun): wait
	// for those without a bound that a busy machine decides, then 1.5 s
	// more for a cancelled one that must not.
	delivered := map[string]bool{}
	for {
		wait := 1500 * time.Millisecond
		for k, o := range outcome {
			if o == sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT && !delivered[k] {
				wait = 30 * time.Second
				break
			}
		}
		d, ok := sub.Next(wait)
		if !ok {
			break
		}
		delivered[string(d.Payload)] = true
	}
	for i := range n {
		k := fmt.Sprint(i)
		switch outcome[k] {
		case sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE:
			if delivered[k] {
				t.Fatalf("message %s was cancelled (DONE) and delivered", k)
			}
		case sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT:
			if !delivered[k] {
				t.Fatalf("message %s answered IN_FLIGHT but never reached the consumer", k)
			}
		default:
			t.Fatalf("message %s: cancel answered %v", k, outcome[k])
		}
	}
}

func TestPurgeUpdateDeleteTopic(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "ops", Partitions: 2}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	for i := range 20 {
		publish(t, c, &sundialv1.Message{Topic: "ops", Payload: []byte(fmt.Sprint(i)), DelayMs: time.Hour.Milliseconds(), Key: fmt.Sprint("p", i)})
	}
	purged, err := c.Admin.PurgeTopic(ctx, &sundialv1.PurgeTopicRequest{Name: "ops"})
	if err != nil || purged.Purged != 20 {
		t.Fatalf("PurgeTopic() = %v, %v, want 20 purged", purged, err)
	}
	list, err := c.Admin.ListMessages(ctx, &sundialv1.ListMessagesRequest{Topic: "ops"})
	if err != nil || len(list.Messages) != 0 {
		t.Fatalf("ListMessages() after purge = %d messages, %v", len(list.GetMessages()), err)
	}
	updated, err := c.Admin.UpdateTopic(ctx, &sundialv1.UpdateTopicRequest{Topic: &sundialv1.Topic{Name: "ops", MaxAttempts: 3, ReleaseRatePerSec: 50}, UpdateMask: []string{"max_attempts", "release_rate_per_sec"}})
	if err != nil || updated.MaxAttempts != 3 || updated.ReleaseRatePerSec != 50 || updated.Partitions != 2 {
		t.Fatalf("UpdateTopic() = %v, %v", updated, err)
	}
	if _, err := c.Admin.DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: "ops"}); err != nil {
		t.Fatalf("DeleteTopic() error = %v", err)
	}
	if _, err := c.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: "ops"}); err == nil {
		t.Fatalf("GetTopic() after delete found the topic")
	}
}

func TestStatsAfterSnapshotRecovery(t *testing.T) {
	c := New(t, Config{Shards: 1, Tune: func(bc *broker.Config) { bc.SnapshotEntries, bc.RaftLogKeepEntries = 20, 10 }})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "snapstats"}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	lagging := (c.LeaderOf(100) + 1) % 3
	c.StopBroker(lagging)
	for i := range 60 {
		publish(t, c, &sundialv1.Message{Topic: "snapstats", Payload: []byte(fmt.Sprint(i)), DelayMs: time.Hour.Milliseconds()})
	}
	c.StartBroker(lagging)
	// Let the restarted replica catch up (by snapshot), then make it lead.
	Eventually(t, 30*time.Second, func() error {
		a, err := c.Nodes[lagging].Server.ShardStateHash(100)
		if err != nil {
			return err
		}
		b, err := c.Nodes[(lagging+1)%3].Server.ShardStateHash(100)
		if err != nil {
			return err
		}
		if string(a) != string(b) {
			return fmt.Errorf("replica not caught up")
		}
		return nil
	})
	for try := 0; c.LeaderOf(100) != lagging; try++ {
		if try == 5 {
			t.Fatalf("the caught-up replica never became leader")
		}
		for i := range c.Nodes {
			if c.Nodes[i].Server == nil {
				c.StartBroker(i)
			}
		}
		c.WaitReady()
		if leader := c.LeaderOf(100); leader != lagging {
			c.StopBroker(leader)
			c.WaitReady()
		}
	}
	Eventually(t, 10*time.Second, func() error {
		topic, err := c.Admin.GetTopic(ctx10(t), &sundialv1.GetTopicRequest{Name: "snapstats"})
		if err != nil {
			return err
		}
		for _, st := range topic.Stats {
			if st.Group == "default" && st.Scheduled == 60 {
				return nil
			}
		}
		return fmt.Errorf("stats %v, want 60 scheduled", topic.Stats)
	})
}

func TestJitterSpreadsDueTimes(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "herd", JitterMs: 2000}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	at := time.Now().Add(time.Minute).UnixMilli()
	var msgs []*sundialv1.Message
	for range 50 {
		msgs = append(msgs, &sundialv1.Message{Topic: "herd", DeliverAtUnixMs: at})
	}
	distinct := map[int64]bool{}
	for _, r := range publish(t, c, msgs...) {
		if r.DueAtUnixMs < at || r.DueAtUnixMs > at+2000 {
			t.Fatalf("due %d outside [%d, %d]", r.DueAtUnixMs, at, at+2000)
		}
		distinct[r.DueAtUnixMs] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("50 messages due at one instant got only %d distinct due times with 2s jitter", len(distinct))
	}
}

// TestCreditBelowShardCount: a subscriber granting one credit on a topic
// spread over four shards gets every message, wherever its shard is.
func TestCreditBelowShardCount(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 4})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "spread", Partitions: 8}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	const n = 12
	shards := map[uint64]bool{}
	for i := range n {
		res := publish(t, c, &sundialv1.Message{Topic: "spread", Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint(i))})
		shards[shardOf(t, res[0].MessageId)] = true
	}
	if len(shards) < 2 {
		t.Fatalf("messages landed on %d shard, want several", len(shards))
	}
	sub := c.Subscribe("spread", "", 1, 0)
	seen := map[string]bool{}
	for _, d := range collect(t, c, sub, n, false) {
		seen[string(d.Payload)] = true
	}
	if len(seen) != n {
		t.Fatalf("received %d distinct messages, want %d", len(seen), n)
	}
}
