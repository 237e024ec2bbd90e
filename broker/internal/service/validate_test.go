package service

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// TestRequestsAreCheckedByValidate sends each handler a request that
// breaks one of proto/validate's limits: the answer is InvalidArgument
// naming exactly that field, before the handler touches the host (this
// Shard has none: a request that got past its checks would fail with
// another code).
func TestRequestsAreCheckedByValidate(t *testing.T) {
	opts := Options{Limits: validate.Limits{MaxDelay: time.Hour, MaxKeyBytes: 8}, Now: func() time.Time { return time.UnixMilli(1_000_000) }}
	s := &Shard{opts: opts, leaderInfo: func(uint64) (*host.Leading, uint64, string, bool) { return nil, 0, "", false }}
	a := &Admin{opts: opts}
	ctx := context.Background()
	byKey := func(key string) *sundialv1.MessageSelector {
		return &sundialv1.MessageSelector{Topic: "t", By: &sundialv1.MessageSelector_Key{Key: key}}
	}
	tests := []struct {
		name string
		call func() error
		want []string
	}{
		{"receive max_messages", func() error {
			_, err := s.Receive(ctx, &brokerv1.ShardReceiveRequest{Request: &sundialv1.ReceiveRequest{Topic: "t", MaxMessages: validate.MaxReceiveMessages + 1}})
			return err
		}, []string{"request.max_messages"}},
		{"receive wait_ms", func() error {
			_, err := s.Receive(ctx, &brokerv1.ShardReceiveRequest{Request: &sundialv1.ReceiveRequest{Topic: "t", WaitMs: validate.MaxReceiveWait.Milliseconds() + 1}})
			return err
		}, []string{"request.wait_ms"}},
		{"cancel key beyond MaxKeyBytes", func() error {
			_, err := s.Cancel(ctx, &brokerv1.ShardChangeRequest{Message: byKey("123456789")})
			return err
		}, []string{"message.key"}},
		{"cancel without selector", func() error {
			_, err := s.Cancel(ctx, &brokerv1.ShardChangeRequest{Message: &sundialv1.MessageSelector{Topic: "t"}})
			return err
		}, []string{"message"}},
		{"reschedule into the past", func() error {
			_, err := s.Reschedule(ctx, &brokerv1.ShardChangeRequest{Message: byKey("k"), DeliverAtUnixMs: 1_000_000 - validate.ReschedulePastSlack.Milliseconds() - 1})
			return err
		}, []string{"deliver_at_unix_ms"}},
		{"reschedule beyond MaxDelay", func() error {
			_, err := s.Reschedule(ctx, &brokerv1.ShardChangeRequest{Message: byKey("k"), DelayMs: time.Hour.Milliseconds() + 1})
			return err
		}, []string{"delay_ms"}},
		{"extend beyond MaxExtend", func() error {
			_, err := s.Extend(ctx, &brokerv1.ShardExtendRequest{ExtendMs: validate.MaxExtend.Milliseconds() + 1})
			return err
		}, []string{"extend_ms"}},
		{"nack beyond MaxDelay", func() error {
			_, err := s.Nack(ctx, &brokerv1.ShardNackRequest{DelayMs: time.Hour.Milliseconds() + 1})
			return err
		}, []string{"delay_ms"}},
		{"redrive bad topic", func() error {
			_, err := s.Redrive(ctx, &brokerv1.ShardRedriveRequest{Topic: "a b"})
			return err
		}, []string{"topic"}},
		{"redrive negative max", func() error {
			_, err := s.Redrive(ctx, &brokerv1.ShardRedriveRequest{Topic: "t", MaxMessages: -1})
			return err
		}, []string{"max_messages"}},
		{"list page_size", func() error {
			_, err := s.ListMessages(ctx, &brokerv1.ShardListMessagesRequest{Request: &sundialv1.ListMessagesRequest{Topic: "t", PageSize: validate.MaxPageSize + 1}})
			return err
		}, []string{"request.page_size"}},
		{"histogram too wide", func() error {
			_, err := s.DueHistogram(ctx, &brokerv1.ShardDueHistogramRequest{Request: &sundialv1.DueHistogramRequest{Topic: "t", FromUnixMs: 60_000, ToUnixMs: 60_000 + (validate.MaxHistogramBuckets+1)*60_000}})
			return err
		}, []string{"request.to_unix_ms"}},
		{"create topic partitions", func() error {
			_, err := a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "t", Partitions: validate.MaxPartitions + 1}})
			return err
		}, []string{"topic.partitions"}},
		{"create topic jitter and release rate", func() error {
			_, err := a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "t", JitterMs: -1, ReleaseRatePerSec: validate.MaxReleaseRatePerSec + 1}})
			return err
		}, []string{"topic.release_rate_per_sec", "topic.jitter_ms"}},
		{"create dead-letter topic", func() error {
			_, err := a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "t.dlq"}})
			return err
		}, []string{"topic.name"}},
		{"list topics page_size", func() error {
			_, err := a.ListTopics(ctx, &sundialv1.ListTopicsRequest{PageSize: validate.MaxPageSize + 1})
			return err
		}, []string{"page_size"}},
		{"create group without group", func() error {
			_, err := a.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "t"})
			return err
		}, []string{"group"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("error = %v, want InvalidArgument", err)
			}
			var got []string
			for _, v := range apierr.Violations(err) {
				got = append(got, v.Field)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("violations = %v, want fields %v (%v)", got, tt.want, strings.TrimSpace(err.Error()))
			}
		})
	}
}
