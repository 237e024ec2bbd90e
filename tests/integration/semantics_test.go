package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// collect receives n deliveries, acking each unless noAck.
func collect(t *testing.T, c *Cluster, sub *Subscriber, n int, noAck bool) []Received {
	t.Helper()
	var out []Received
	for len(out) < n {
		got, ok := sub.Next(20 * time.Second)
		if !ok {
			t.Fatalf("received %d of %d (stream error %v)", len(out), n, sub.Err())
		}
		out = append(out, got)
		if !noAck {
			ack(t, c, got.Receipt)
		}
		sub.Credit(1)
	}
	return out
}

func TestGroupsFanOutIndependently(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	// The whole test runs under ctx: two groups receive and ack 1,000
	// messages each, one by one, before ListGroups.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Admin.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "events", Group: "billing"}); err != nil {
		t.Fatalf("CreateGroup() error = %v", err)
	}
	const n = 1000
	msgs := make([]*sundialv1.Message, n)
	for i := range msgs {
		msgs[i] = &sundialv1.Message{Topic: "events", Payload: []byte(fmt.Sprint(i))}
	}
	publish(t, c, msgs...)
	// The default group acks everything; billing must still get all.
	def := c.Subscribe("events", "", 200, 0)
	if got := collect(t, c, def, n, false); len(got) != n {
		t.Fatalf("default got %d", len(got))
	}
	billing := c.Subscribe("events", "billing", 200, 0)
	seen := map[string]bool{}
	for _, d := range collect(t, c, billing, n, false) {
		seen[d.MessageId] = true
	}
	if len(seen) != n {
		t.Fatalf("billing received %d distinct messages, want %d", len(seen), n)
	}
	// A group created now receives only later messages, from when it is
	// registered on every shard (the stream does not say when).
	late := c.Subscribe("events", "late", 10, 0)
	waitGroupCreated(t, c, "events", "late")
	if got, ok := late.Next(500 * time.Millisecond); ok {
		t.Fatalf("new group received an older message %v", got.MessageId)
	}
	res := publish(t, c, &sundialv1.Message{Topic: "events", Payload: []byte("after")})
	if got, ok := late.Next(10 * time.Second); !ok || got.MessageId != res[0].MessageId {
		t.Fatalf("new group delivery = %v, %v, want the later message (stream error %v)", got.Delivery, ok, late.Err())
	}
	groups, err := c.Admin.ListGroups(ctx, &sundialv1.ListGroupsRequest{Topic: "events"})
	if err != nil || len(groups.Groups) != 3 {
		t.Fatalf("ListGroups() = %v, %v, want billing, default, late", groups, err)
	}
}

// The key semantics hold on a topic of one partition and of several (its
// keys then spread over both shards).
func TestMessageKeys(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	for _, parts := range []int32{1, 8} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			topic := fmt.Sprint("keys-", parts)
			wideTopic(t, c, topic, parts, nil)
			messageKeys(t, c, topic)
		})
	}
}

func messageKeys(t *testing.T, c *Cluster, topic string) {
	now := time.Now()
	keyed := func(conflict sundialv1.KeyConflict, payload string, delay time.Duration, maxWait time.Duration) *sundialv1.PublishResult {
		ctx := ctx10(t)
		resp, err := c.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{
			Topic: topic, Key: "order-7", Payload: []byte(payload), DelayMs: delay.Milliseconds(),
			OnKeyConflict: conflict, MaxWaitMs: maxWait.Milliseconds(),
		}}})
		if err != nil {
			t.Fatalf("Publish() error = %v", err)
		}
		return resp.Results[0]
	}
	first := keyed(sundialv1.KeyConflict_KEY_CONFLICT_IGNORE, "a", time.Hour, 0)
	again := keyed(sundialv1.KeyConflict_KEY_CONFLICT_IGNORE, "b", time.Hour, 0)
	if again.MessageId != first.MessageId || again.KeyOutcome != sundialv1.KeyOutcome_KEY_OUTCOME_IGNORED {
		t.Fatalf("IGNORE again = %v, want the first id %s", again, first.MessageId)
	}
	rejected := keyed(sundialv1.KeyConflict_KEY_CONFLICT_REJECT, "c", time.Hour, 0)
	if codes.Code(rejected.GetError().GetCode()) != codes.AlreadyExists {
		t.Fatalf("REJECT = %v, want AlreadyExists", rejected)
	}
	replaced := keyed(sundialv1.KeyConflict_KEY_CONFLICT_REPLACE, "d", 2*time.Hour, 0)
	if replaced.MessageId != first.MessageId || replaced.DueAtUnixMs < now.Add(2*time.Hour).UnixMilli() {
		t.Fatalf("REPLACE = %v, want the same id due in 2h", replaced)
	}
	info, err := c.Admin.GetMessage(ctx10(t), &sundialv1.GetMessageRequest{Message: &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: "order-7"}}})
	if err != nil || string(info.Payload) != "d" {
		t.Fatalf("GetMessage(key) = %v, %v, want payload d", info, err)
	}
	// Debounce on a fresh key: pushed later, never past the cap.
	deb := func(delay time.Duration) *sundialv1.PublishResult {
		ctx := ctx10(t)
		resp, err := c.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{
			Topic: topic, Key: "debounced", DelayMs: delay.Milliseconds(),
			OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE, MaxWaitMs: time.Minute.Milliseconds(),
		}}})
		if err != nil {
			t.Fatalf("Publish() error = %v", err)
		}
		return resp.Results[0]
	}
	d1 := deb(10 * time.Second)
	d2 := deb(30 * time.Second)
	d3 := deb(10 * time.Minute)
	if d2.MessageId != d1.MessageId || d2.DueAtUnixMs <= d1.DueAtUnixMs || d2.KeyOutcome != sundialv1.KeyOutcome_KEY_OUTCOME_DEBOUNCED {
		t.Fatalf("DEBOUNCE = %v after %v, want the same id pushed later", d2, d1)
	}
	if d3.DueAtUnixMs > d1.DueAtUnixMs-10_000+60_000+1000 {
		t.Fatalf("DEBOUNCE due %d past the cap (first publish + 1 minute ≈ %d)", d3.DueAtUnixMs, d1.DueAtUnixMs-10_000+60_000)
	}
}

// Cancel and reschedule hold on a topic of one partition and of several.
func TestCancelAndReschedule(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	for _, parts := range []int32{1, 8} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			topic := fmt.Sprint("jobs-", parts)
			wideTopic(t, c, topic, parts, nil)
			cancelAndReschedule(t, c, topic)
		})
	}
}

func cancelAndReschedule(t *testing.T, c *Cluster, topic string) {
	ctx := ctx10(t)
	sel := func(key string) *sundialv1.MessageSelector {
		return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: key}}
	}
	publish(t, c, &sundialv1.Message{Topic: topic, Key: "cancel-me", Payload: []byte("x"), DelayMs: 500})
	resp, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel("cancel-me")})
	if err != nil || resp.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Cancel() = %v, %v, want DONE", resp, err)
	}
	if again, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel("cancel-me")}); err != nil || again.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("retried Cancel() = %v, %v, want DONE again", again, err)
	}
	if nf, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel("never")}); err != nil || nf.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND {
		t.Fatalf("Cancel(unknown) = %v, %v, want NOT_FOUND", nf, err)
	}
	publish(t, c, &sundialv1.Message{Topic: topic, Key: "move-me", Payload: []byte("moved"), DelayMs: time.Hour.Milliseconds()})
	rs, err := c.Producer.Reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel("move-me"), DelayMs: 300})
	if err != nil || rs.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Reschedule() = %v, %v, want DONE", rs, err)
	}
	if _, err := c.Producer.Reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel("move-me"), DeliverAtUnixMs: time.Now().Add(-time.Hour).UnixMilli()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Reschedule(into the past) error = %v, want InvalidArgument", err)
	}
	sub := c.Subscribe(topic, "", 10, 0)
	got, ok := sub.Next(10 * time.Second)
	if !ok || string(got.Payload) != "moved" {
		t.Fatalf("delivery = %v, %v, want only the rescheduled message", got.Delivery, ok)
	}
	// In flight now: cancel answers so and changes nothing.
	inflight, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel("move-me")})
	if err != nil || inflight.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT {
		t.Fatalf("Cancel(in flight) = %v, %v, want IN_FLIGHT", inflight, err)
	}
	if r := ack(t, c, got.Receipt); r[0].Error != nil {
		t.Fatalf("ack after IN_FLIGHT cancel = %v, want success", r[0].Error)
	}
	done, err := c.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel("move-me")})
	if err != nil || done.Outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_ALREADY_DELIVERED {
		t.Fatalf("Cancel(delivered) = %v, %v, want ALREADY_DELIVERED", done, err)
	}
	if extra, ok := sub.Next(800 * time.Millisecond); ok {
		t.Fatalf("cancelled message delivered: %v", extra.Delivery)
	}
}

// Dead letters and redrive hold on a topic of one partition and of several.
func TestDeadLettersAndRedrive(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	for _, parts := range []int32{1, 8} {
		t.Run(fmt.Sprint("partitions=", parts), func(t *testing.T) {
			topic := fmt.Sprint("flaky-", parts)
			wideTopic(t, c, topic, parts, func(tp *sundialv1.Topic) { tp.MaxAttempts = 3 })
			deadLettersAndRedrive(t, c, topic)
		})
	}
}

func deadLettersAndRedrive(t *testing.T, c *Cluster, topic string) {
	ctx := ctx10(t)
	res := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte("boom")})
	sub := c.Subscribe(topic, "", 10, 0)
	for attempt := int32(1); attempt <= 3; attempt++ {
		got, ok := sub.Next(10 * time.Second)
		if !ok || got.Attempt != attempt {
			t.Fatalf("attempt %d = %v, %v", attempt, got.Delivery, ok)
		}
		nack, err := c.Consumer.Nack(ctx, &sundialv1.NackRequest{Receipts: []string{got.Receipt}, DelayMs: 1, Reason: "handler failed"})
		if err != nil || nack.Results[0].Error != nil {
			t.Fatalf("Nack() = %v, %v", nack, err)
		}
		sub.Credit(1)
	}
	dlq := c.Subscribe(topic+".dlq", "", 10, 0)
	dead, ok := dlq.Next(10 * time.Second)
	if !ok || dead.Headers["sundial-original-topic"] != topic || dead.Headers["sundial-last-reason"] != "handler failed" || dead.Headers["sundial-original-id"] != res[0].MessageId {
		t.Fatalf("dead letter = %v, %v", dead.Delivery, ok)
	}
	if more, ok := sub.Next(500 * time.Millisecond); ok {
		t.Fatalf("a 4th attempt was delivered: %v", more.Delivery)
	}
	dlq.Close()
	// The dead letter's lease must run out before it can be redriven: nack
	// it back to the dead-letter queue first.
	if _, err := c.Consumer.Nack(ctx, &sundialv1.NackRequest{Receipts: []string{dead.Receipt}, DelayMs: 1}); err != nil {
		t.Fatalf("Nack(dead letter) error = %v", err)
	}
	moved, err := c.Admin.RedriveDeadLetters(ctx, &sundialv1.RedriveDeadLettersRequest{Topic: topic})
	if err != nil || moved.Moved != 1 {
		t.Fatalf("RedriveDeadLetters() = %v, %v, want 1 moved", moved, err)
	}
	back, ok := sub.Next(10 * time.Second)
	if !ok || string(back.Payload) != "boom" || back.Attempt != 1 {
		t.Fatalf("redriven delivery = %v, %v, want boom at attempt 1", back.Delivery, ok)
	}
}

func TestTTLExpiredNeverDelivered(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	publish(t, c,
		&sundialv1.Message{Topic: "ttl", Payload: []byte("short"), DelayMs: 200, TtlMs: 100},
		&sundialv1.Message{Topic: "ttl", Payload: []byte("long"), DelayMs: 200, TtlMs: 60_000},
	)
	time.Sleep(600 * time.Millisecond) // both due, the first expired, nobody consuming
	sub := c.Subscribe("ttl", "", 10, 0)
	got, ok := sub.Next(10 * time.Second)
	if !ok || string(got.Payload) != "long" {
		t.Fatalf("delivery = %v, %v, want only the unexpired message", got.Delivery, ok)
	}
	if extra, ok := sub.Next(800 * time.Millisecond); ok {
		t.Fatalf("expired message delivered: %v", extra.Delivery)
	}
}

func TestInspectionAndStats(t *testing.T) {
	c := New(t, Config{Shards: 4})
	ctx := ctx10(t)
	base := time.Now().Add(time.Hour).Truncate(time.Minute)
	var msgs []*sundialv1.Message
	for i := range 30 {
		msgs = append(msgs, &sundialv1.Message{Topic: "inspect", Payload: []byte(fmt.Sprint(i)), DeliverAtUnixMs: base.Add(time.Duration(i) * time.Minute).UnixMilli(), Headers: map[string]string{"tenant": fmt.Sprint(i % 3)}})
	}
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "inspect", Partitions: 4}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	publish(t, c, msgs...)
	// Minutes 5..14 inclusive: exactly 10 messages, in due order, over pages.
	var listed []*sundialv1.MessageInfo
	token := ""
	for page := 0; page < 10; page++ {
		resp, err := c.Admin.ListMessages(ctx, &sundialv1.ListMessagesRequest{Topic: "inspect", FromUnixMs: base.Add(5 * time.Minute).UnixMilli(), ToUnixMs: base.Add(15 * time.Minute).UnixMilli(), PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatalf("ListMessages() error = %v", err)
		}
		listed = append(listed, resp.Messages...)
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	if len(listed) != 10 {
		t.Fatalf("listed %d messages in the range, want 10", len(listed))
	}
	for i, m := range listed {
		if string(m.Payload) != fmt.Sprint(i+5) {
			t.Fatalf("listed[%d] = %s, want %d (due order)", i, m.Payload, i+5)
		}
	}
	byHeader, err := c.Admin.ListMessages(ctx, &sundialv1.ListMessagesRequest{Topic: "inspect", HeaderKey: "tenant", HeaderValue: "1", PageSize: 100})
	if err != nil || len(byHeader.Messages) != 10 {
		t.Fatalf("ListMessages(tenant=1) = %d messages, %v, want 10", len(byHeader.GetMessages()), err)
	}
	hist, err := c.Admin.DueHistogram(ctx, &sundialv1.DueHistogramRequest{Topic: "inspect", Bucket: sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR, FromUnixMs: base.Add(-time.Hour).UnixMilli(), ToUnixMs: base.Add(3 * time.Hour).UnixMilli()})
	if err != nil {
		t.Fatalf("DueHistogram() error = %v", err)
	}
	var total int64
	for _, b := range hist.Counts {
		total += b.Count
	}
	if total != 30 {
		t.Fatalf("histogram counts %d messages, want 30", total)
	}
	// Stats: 30 scheduled; 2 due now delivered and held (in flight); the
	// credit covers every shard, so each shard's stream holds some.
	publish(t, c, &sundialv1.Message{Topic: "inspect", Payload: []byte("now1")}, &sundialv1.Message{Topic: "inspect", Payload: []byte("now2")})
	sub := c.Subscribe("inspect", "", 8, time.Minute)
	for range 2 {
		if _, ok := sub.Next(10 * time.Second); !ok {
			t.Fatalf("no delivery")
		}
	}
	wantStats := func(when string) {
		t.Helper()
		Eventually(t, 10*time.Second, func() error {
			topic, err := c.Admin.GetTopic(ctx10(t), &sundialv1.GetTopicRequest{Name: "inspect"})
			if err != nil {
				return err
			}
			for _, st := range topic.Stats {
				if st.Group == "default" {
					if st.Scheduled != 30 || st.InFlight != 2 || st.Ready != 0 {
						return fmt.Errorf("%s: stats = %v, want 30 scheduled, 2 in flight, 0 ready", when, st)
					}
					return nil
				}
			}
			return fmt.Errorf("%s: no stats for the default group in %v", when, topic.Stats)
		})
	}
	wantStats("steady")
	// After the leader of every shard changes, the counts are the same.
	sub.Close()
	leaders := map[int]bool{}
	for _, s := range []uint64{100, 101, 102, 103} {
		leaders[c.LeaderOf(s)] = true
	}
	for i := range leaders {
		c.StopBroker(i)
		break
	}
	c.WaitReady()
	wantStats("after a leader change")
}

func TestFairTopic(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "tenants", Kind: sundialv1.TopicKind_TOPIC_KIND_FAIR}}); err != nil {
		t.Fatalf("CreateTopic(FAIR) error = %v", err)
	}
	for batch := range 10 {
		msgs := make([]*sundialv1.Message, 1000)
		for i := range msgs {
			msgs[i] = &sundialv1.Message{Topic: "tenants", FairnessKey: "a", Payload: []byte("a"), Key: fmt.Sprintf("a-%d-%d", batch, i)}
		}
		publish(t, c, msgs...)
	}
	var trickle []*sundialv1.Message
	for i := range 10 {
		trickle = append(trickle, &sundialv1.Message{Topic: "tenants", FairnessKey: "b", Payload: []byte("b"), Key: fmt.Sprintf("b-%d", i)})
	}
	publish(t, c, trickle...)
	sub := c.Subscribe("tenants", "", 1, 0)
	b := 0
	for _, d := range collect(t, c, sub, 20, false) {
		if string(d.Payload) == "b" {
			b++
		}
	}
	if b != 10 {
		t.Fatalf("tenant b got %d of its 10 messages in the first 20 deliveries after a flood of 10000 from a", b)
	}
}
