package faults

import (
	"context"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestAddShardsWhileMetaLeaderPaused: AddShards asked of a broker right
// after the meta leader froze (SIGSTOP) answers the new shards within the
// caller's deadline. The broker's first proposal, forwarded to the frozen
// leader, is lost; it proposes again each try until one reaches the meta
// leader elected meanwhile (~9 s). Before, the call waited on the lost
// proposal for its whole deadline and answered an error.
func TestAddShardsWhileMetaLeaderPaused(t *testing.T) {
	c, leader, asked := metaLeaderCluster(t)
	cl := dial(t, c.Brokers[asked-1].GRPCAddr)

	if err := c.Pause(leader); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Resume(leader) })
	// 60 s: ample for the election (~9 s) and the wait for the new shards
	// to serve (at most 30 s, then they are answered as starting).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := cl.cluster.AddShards(ctx, &sundialv1.AddShardsRequest{Count: 1})
	if err != nil {
		t.Fatalf("AddShards on broker %d right after meta leader %d froze: %v after %v; want the new shard",
			asked, leader, err, time.Since(start).Round(time.Millisecond))
	}
	if len(resp.GetShards()) != 1 {
		t.Fatalf("AddShards(count 1) answered shards %v, want 1 new shard", resp.GetShards())
	}
	t.Logf("broker %d answered shard %d after %v", asked, resp.GetShards()[0].GetShardId(), time.Since(start).Round(time.Millisecond))
}
