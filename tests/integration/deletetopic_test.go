package integration

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// A topic deleted and created again starts afresh on its shard: the groups
// of the old topic get no copies and its counters are gone.
func TestRecreatedTopicStartsAfresh(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	ctx := ctx10(t)
	create := func() {
		t.Helper()
		if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "again"}}); err != nil {
			t.Fatalf("CreateTopic() error = %v", err)
		}
	}
	create()
	if _, err := c.Admin.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "again", Group: "g2"}); err != nil {
		t.Fatalf("CreateGroup() error = %v", err)
	}
	publish(t, c, &sundialv1.Message{Topic: "again", Payload: []byte("old"), DelayMs: time.Hour.Milliseconds()})
	if _, err := c.Admin.DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: "again"}); err != nil {
		t.Fatalf("DeleteTopic() error = %v", err)
	}
	create()
	publish(t, c, &sundialv1.Message{Topic: "again", Payload: []byte("new")})

	conn, err := grpc.NewClient(c.Nodes[0].Config.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial broker: %v", err)
	}
	defer conn.Close()
	stats, err := brokerv1.NewShardClient(conn).Stats(ctx, &brokerv1.ShardTopicRequest{ShardId: meta.FirstEventShard, Topic: "again", Partitions: []uint32{0}})
	if err != nil {
		t.Fatalf("Shard.Stats() error = %v", err)
	}
	var groups []string
	for _, g := range stats.Stats {
		groups = append(groups, g.Group)
		if g.Group == "default" && (g.Ready != 1 || g.DeadLettered != 0 || g.InFlight != 0) {
			t.Errorf("default group of the re-created topic = %v, want the 1 new message ready", g)
		}
	}
	if len(groups) != 1 || groups[0] != "default" {
		t.Fatalf("groups on the shard of the re-created topic = %v, want [default]", groups)
	}
}
