package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

func TestBadPublishIsRejectedAndWritesNothing(t *testing.T) {
	c := New(t, Config{Shards: 2})
	tooBig := make([]byte, 1<<20+1)
	tests := []struct {
		name  string
		msgs  []*sundialv1.Message
		field string
	}{
		{"empty batch", nil, "messages"},
		{"empty topic", []*sundialv1.Message{{Topic: ""}}, "messages[0].topic"},
		{"invalid topic", []*sundialv1.Message{{Topic: "bad topic!"}}, "messages[0].topic"},
		{"delay and deliver_at", []*sundialv1.Message{{Topic: "bad-a", DelayMs: 5, DeliverAtUnixMs: time.Now().UnixMilli() + 5000}}, "messages[0]"},
		{"negative delay", []*sundialv1.Message{{Topic: "bad-b", DelayMs: -1}}, "messages[0].delay_ms"},
		{"delay beyond maximum", []*sundialv1.Message{{Topic: "bad-c", DelayMs: 400 * 24 * time.Hour.Milliseconds()}}, "messages[0].delay_ms"},
		{"payload too large", []*sundialv1.Message{{Topic: "bad-d", Payload: tooBig}}, "messages[0].payload"},
		{"one bad among good", []*sundialv1.Message{{Topic: "bad-e"}, {Topic: "bad-e", DelayMs: -5}}, "messages[1].delay_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: tt.msgs})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Publish() error = %v, want InvalidArgument", err)
			}
			found := false
			for _, v := range apierr.Violations(err) {
				found = found || strings.HasPrefix(v.Field, tt.field)
			}
			if !found {
				t.Fatalf("Publish() violations = %v, want one on %s", apierr.Violations(err), tt.field)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.Admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{Prefix: "bad-"})
	if err != nil || len(list.Topics) != 0 {
		t.Fatalf("ListTopics(bad-) = %v, %v, want no topics: rejected publishes must write nothing", list, err)
	}
}

func TestSubscribeWithoutStart(t *testing.T) {
	c := New(t, Config{Shards: 1, Brokers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.Consumer.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe() error = %v", err)
	}
	if err := stream.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Credit{Credit: &sundialv1.Credit{N: 1}}}); err != nil {
		t.Fatalf("Send() error = %v", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Recv() error = %v, want InvalidArgument", err)
	}
	stream2, _ := c.Consumer.Subscribe(ctx)
	if err := stream2.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "ok", VisibilityTimeoutMs: 5}}}); err != nil {
		t.Fatalf("Send(Start) error = %v", err)
	}
	if _, err := stream2.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Recv() after a 5ms visibility timeout error = %v, want InvalidArgument", err)
	}
}

func TestBadReceipts(t *testing.T) {
	c := New(t, Config{Shards: 1, Brokers: 1})
	res := publish(t, c, &sundialv1.Message{Topic: "receipts", Payload: []byte("x")})
	id, _ := receipt.ParseMessageID(res[0].MessageId)
	never := receipt.Receipt{Message: id, Group: "default", Attempt: 3}.String()
	unknownMsg := receipt.Receipt{Message: receipt.NewMessageID(id.Shard(), 999999, 0), Group: "default", Attempt: 1}.String()
	results := ack(t, c, "not-a-receipt", never, unknownMsg)
	want := []codes.Code{codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound}
	for i, r := range results {
		if got := codes.Code(r.GetError().GetCode()); got != want[i] {
			t.Errorf("ack result %d = %v, want %v", i, r.GetError(), want[i])
		}
	}
	// The message was never delivered, so a made-up receipt left it alone.
	sub := c.Subscribe("receipts", "", 1, 0)
	if got, ok := sub.Next(10 * time.Second); !ok || got.MessageId != res[0].MessageId || got.Attempt != 1 {
		t.Fatalf("delivery after bad acks = %v, %v, want attempt 1 of %s", got.Delivery, ok, res[0].MessageId)
	}
}

func TestAdminTopics(t *testing.T) {
	c := New(t, Config{Shards: 1, Brokers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	created, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "payments", Partitions: 4}})
	if err != nil || created.Partitions != 4 || created.VisibilityTimeoutMs != 30000 || created.MaxAttempts != 10 {
		t.Fatalf("CreateTopic() = %v, %v, want 4 partitions with defaults filled", created, err)
	}
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "payments"}}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("CreateTopic(existing) error = %v, want AlreadyExists", err)
	}
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "payments"}, IfNotExists: true}); err != nil {
		t.Fatalf("CreateTopic(existing, if_not_exists) error = %v", err)
	}
	for _, bad := range []*sundialv1.Topic{{Name: "x y"}, {Name: "ok", Partitions: 5000}, {Name: "ok", VisibilityTimeoutMs: 10}, {Name: "ok", MaxAttempts: -1}, {Name: "orders.dlq"}} {
		if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: bad}); status.Code(err) != codes.InvalidArgument || len(apierr.Violations(err)) == 0 {
			t.Errorf("CreateTopic(%v) error = %v, want InvalidArgument with field violations", bad, err)
		}
	}
	if _, err := c.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: "missing"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetTopic(missing) error = %v, want NotFound", err)
	}
	publish(t, c, &sundialv1.Message{Topic: "auto-created", Payload: []byte("x")})
	got, err := c.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: "auto-created"})
	if err != nil || got.Partitions != 1 {
		t.Fatalf("GetTopic(auto-created) = %v, %v, want a 1-partition topic", got, err)
	}
	list, err := c.Admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{PageSize: 1})
	if err != nil || len(list.Topics) != 1 || list.NextPageToken == "" {
		t.Fatalf("ListTopics(page 1) = %v, %v", list, err)
	}
	rest, err := c.Admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{PageToken: list.NextPageToken})
	if err != nil || len(rest.Topics) != 1 || rest.Topics[0].Name == list.Topics[0].Name {
		t.Fatalf("ListTopics(page 2) = %v, %v", rest, err)
	}
}
