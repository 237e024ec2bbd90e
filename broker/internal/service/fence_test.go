package service

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/ring"
)

// A keyed publish the shard's fence refuses in apply (the partition's
// hand-over is being sealed: host.checkHandovers) answers misplaced
// (NotFound with a WrongShard detail naming the topic and partition), so
// the proxy routes it again with a newer table; unkeyed publishes of the
// partition are stored as before.
func TestFencedKeyedPublishAnswersMisplaced(t *testing.T) {
	s, shard := singleNode(t)
	ctx := t.Context()
	const topic, parts = "moving", 4
	if _, err := s.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: topic, Partitions: parts}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	const key = "order-1"
	part := ring.KeyPartition(key, parts)
	lead, err := s.leading(shard)
	if err != nil {
		t.Fatal(err)
	}
	out, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Fence{Fence: &fsmpb.Fence{Topic: topic, Partition: part, Partitions: parts}}})
	if err != nil || out.GetKeysHeld() {
		t.Fatalf("fence = %v, %v; want it set", out, err)
	}
	publish := func(m *sundialv1.Message) error {
		_, err := s.Publish(ctx, &brokerv1.ShardPublishRequest{ShardId: shard, Messages: []*brokerv1.PartitionedMessage{{Message: m, Partition: part}}})
		return err
	}
	err = publish(&sundialv1.Message{Topic: topic, Key: key, Payload: []byte("x"), DelayMs: time.Hour.Milliseconds()})
	ws, ok := apierr.AsWrongShard(err)
	if status.Code(err) != codes.NotFound || !ok || ws.GetTopic() != topic || ws.GetPartition() != part || ws.GetShardId() != shard {
		t.Fatalf("keyed publish to a fenced partition = %v (detail %v), want NotFound misplaced naming %s partition %d on shard %d", err, ws, topic, part, shard)
	}
	if err := publish(&sundialv1.Message{Topic: topic, Payload: []byte("y"), DelayMs: time.Hour.Milliseconds()}); err != nil {
		t.Fatalf("unkeyed publish to a fenced partition = %v, want it stored", err)
	}
}
