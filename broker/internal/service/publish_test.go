package service

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestPublishEnforcesTopicSettings(t *testing.T) {
	s, shard := singleNode(t)
	ctx := t.Context()
	topic := &sundialv1.Topic{Name: "capped", MaxMessageBytes: 10, RetentionMs: time.Minute.Milliseconds()}
	if _, err := s.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	publish := func(m *sundialv1.Message) (*sundialv1.PublishResponse, error) {
		return s.Publish(ctx, &brokerv1.ShardPublishRequest{ShardId: shard, Messages: []*brokerv1.PartitionedMessage{{Message: m}}})
	}

	t.Run("max_message_bytes", func(t *testing.T) {
		_, err := publish(&sundialv1.Message{Topic: "capped", Payload: []byte("eleven byte")})
		vs := apierr.Violations(err)
		if len(vs) != 1 || !strings.HasSuffix(vs[0].Field, "payload") || !strings.Contains(vs[0].Description, "at most 10 bytes") {
			t.Fatalf("Publish(11 bytes to a 10-byte topic) = %v (violations %v), want InvalidArgument on the payload naming 10 bytes", err, vs)
		}
		if _, err := publish(&sundialv1.Message{Topic: "capped", Payload: []byte("ten bytes!")}); err != nil {
			t.Fatalf("Publish(10 bytes) error = %v, want stored", err)
		}
	})

	t.Run("retention_ms", func(t *testing.T) {
		tests := []struct {
			name  string
			ttlMs int64
			life  int64 // expiry minus due time
		}{
			{"no ttl: retention bounds the wait", 0, time.Minute.Milliseconds()},
			{"shorter ttl wins", 5000, 5000},
			{"longer ttl is capped", time.Hour.Milliseconds(), time.Minute.Milliseconds()},
		}
		for _, tt := range tests {
			resp, err := publish(&sundialv1.Message{Topic: "capped", Payload: []byte("x"), DelayMs: time.Hour.Milliseconds(), TtlMs: tt.ttlMs})
			if err != nil {
				t.Fatalf("%s: Publish() error = %v", tt.name, err)
			}
			id := resp.GetResults()[0].GetMessageId()
			info, err := s.GetMessage(ctx, &brokerv1.ShardChangeRequest{ShardId: shard, Message: &sundialv1.MessageSelector{Topic: "capped", By: &sundialv1.MessageSelector_MessageId{MessageId: id}}})
			if err != nil {
				t.Fatalf("%s: GetMessage() error = %v", tt.name, err)
			}
			if got := info.GetExpiresAtUnixMs() - info.GetDueAtUnixMs(); info.GetExpiresAtUnixMs() == 0 || got != tt.life {
				t.Errorf("%s: expires %d ms after due (expires_at %d), want %d", tt.name, got, info.GetExpiresAtUnixMs(), tt.life)
			}
		}
	})
}

func TestExpiresAt(t *testing.T) {
	tests := []struct {
		name                string
		due, ttl, retention int64
		want                int64
	}{
		{"neither: never", 1000, 0, 0, 0},
		{"ttl only", 1000, 50, 0, 1050},
		{"retention only", 1000, 0, 70, 1070},
		{"ttl shorter", 1000, 50, 70, 1050},
		{"retention shorter", 1000, 90, 70, 1070},
	}
	for _, tt := range tests {
		if got := expiresAt(tt.due, tt.ttl, tt.retention); got != tt.want {
			t.Errorf("%s: expiresAt(%d, %d, %d) = %d, want %d", tt.name, tt.due, tt.ttl, tt.retention, got, tt.want)
		}
	}
}

// A batch to topics the cluster does not know yet creates each topic once,
// not once per message: a 10,000-message batch to a new topic made 10,000
// meta proposals before (1,000 took 4.6 s; 10,000 answered
// DeadlineExceeded for every message). Every message is stored.
func TestPublishBatchToNewTopicsCreatesEachOnce(t *testing.T) {
	s, shard := singleNode(t)
	const n = 10_000
	msgs := make([]*brokerv1.PartitionedMessage, n)
	for i := range msgs {
		topic := "fresh"
		if i%1000 == 999 {
			topic = "fresher"
		}
		msgs[i] = &brokerv1.PartitionedMessage{Message: &sundialv1.Message{Topic: topic, Payload: []byte("x"), DelayMs: time.Hour.Milliseconds()}}
	}
	resp, err := s.Publish(t.Context(), &brokerv1.ShardPublishRequest{ShardId: shard, Messages: msgs})
	if err != nil {
		t.Fatalf("Publish(%d messages to 2 new topics) error = %v", n, err)
	}
	if len(resp.GetResults()) != n {
		t.Fatalf("Publish() answered %d results, want %d", len(resp.GetResults()), n)
	}
	for i, r := range resp.GetResults() {
		if r.GetError() != nil || r.GetMessageId() == "" {
			t.Fatalf("result %d = %v, want a stored message", i, r)
		}
	}
	if got := testutil.ToFloat64(s.metrics.topicCreates); got != 2 {
		t.Errorf("topic creations proposed to meta = %v, want 2 (one per new topic)", got)
	}
	for _, topic := range []string{"fresh", "fresher"} {
		if _, ok := s.meta.Meta().Topics[topic]; !ok {
			t.Errorf("meta has no topic %q after the publish", topic)
		}
	}
}
