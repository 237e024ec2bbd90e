package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// A topic's groups are registrations on each shard holding its
// partitions. Growing the ring hands partitions to shards that never held
// the topic: they must get every group of it before they serve, or a
// message published to a moved partition reaches only the default group.
// A group created while hand-overs are open must cover the new shards too,
// and a retried AddShards answers the growth in progress.
// Every message, published before or after the growth, reaches every
// group exactly once.
func TestAddShardsKeepsEveryGroup(t *testing.T) {
	c := New(t, Config{Shards: 4})
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	const topic, parts = "fan", 16
	if _, err := c.Admin.CreateTopic(ctx10(t), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: topic, Partitions: parts}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	if _, err := c.Admin.CreateGroup(ctx10(t), &sundialv1.CreateGroupRequest{Topic: topic, Group: "audit"}); err != nil {
		t.Fatalf("CreateGroup(audit) error = %v", err)
	}
	publishN := func(n int, tag string) []string {
		var ids []string
		for i := 0; i < n; i += 16 {
			msgs := make([]*sundialv1.Message, 16)
			for j := range msgs {
				msgs[j] = &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(tag, i+j))}
			}
			for _, r := range publish(t, c, msgs...) {
				ids = append(ids, r.GetMessageId())
			}
		}
		return ids
	}
	before := publishN(64, "before-")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	added, err := cl.AddShards(ctx, &sundialv1.AddShardsRequest{Count: 4})
	cancel()
	if err != nil {
		t.Fatalf("AddShards(4) error = %v", err)
	}
	moved := 0
	for _, h := range added.GetHandovers() {
		if h.GetTopic() == topic {
			moved++
		}
	}
	for _, s := range added.GetShards() {
		if s.GetStarting() {
			t.Fatalf("AddShards(4) answered shard %v still starting", s)
		}
	}
	if moved == 0 {
		t.Fatalf("AddShards(4) = %v: no partition of %s hands over", added, topic)
	}
	// The same request again (a client that timed out) answers the growth
	// in progress instead of refusing it, and adds nothing.
	retried, err := cl.AddShards(ctx10(t), &sundialv1.AddShardsRequest{Count: 4})
	if err != nil {
		t.Fatalf("AddShards(4) retried while hand-overs are open: error = %v, want the growth in progress", err)
	}
	for i, s := range retried.GetShards() {
		if i >= len(added.GetShards()) || s.GetShardId() != added.GetShards()[i].GetShardId() {
			t.Fatalf("retried AddShards(4) shards = %v, want the same as the first answer %v", retried.GetShards(), added.GetShards())
		}
	}
	if len(retried.GetShards()) != 4 {
		t.Fatalf("retried AddShards(4) answered %d shards, want 4", len(retried.GetShards()))
	}
	if _, err := c.Admin.CreateGroup(ctx10(t), &sundialv1.CreateGroupRequest{Topic: topic, Group: "late"}); err != nil {
		t.Fatalf("CreateGroup(late) while hand-overs are open: error = %v", err)
	}
	after := publishN(128, "after-")

	for _, tt := range []struct {
		group string
		want  []string
	}{
		{"default", append(slices.Clone(before), after...)},
		{"audit", append(slices.Clone(before), after...)},
		{"late", after},
	} {
		t.Run(tt.group, func(t *testing.T) {
			sub := c.Subscribe(topic, tt.group, 64, 0)
			defer sub.Close()
			got := map[string]bool{}
			for len(got) < len(tt.want) {
				d, ok := sub.Next(30 * time.Second)
				if !ok {
					var missing []string
					for _, id := range tt.want {
						if !got[id] {
							missing = append(missing, id)
						}
					}
					t.Fatalf("group %s received %d of %d messages (stream error %v); missing %d, e.g. %v",
						tt.group, len(got), len(tt.want), sub.Err(), len(missing), missing[:min(3, len(missing))])
				}
				if got[d.MessageId] {
					t.Fatalf("group %s: message %s delivered twice", tt.group, d.MessageId)
				}
				if !slices.Contains(tt.want, d.MessageId) {
					t.Fatalf("group %s: delivered %s (payload %q), want only %d messages published after the group", tt.group, d.MessageId, d.Payload, len(tt.want))
				}
				got[d.MessageId] = true
				ack(t, c, d.Receipt)
				sub.Credit(1)
			}
			if extra, ok := sub.Next(time.Second); ok {
				t.Fatalf("group %s: extra delivery %s (payload %q)", tt.group, extra.MessageId, extra.Payload)
			}
		})
	}
}
