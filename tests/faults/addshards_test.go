package faults

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/workload"
)

// TestAddShardsUnderLoad grows a 3-broker process cluster from 8 to 16
// shards while the recorded workload publishes (keyed and unkeyed, with
// delays spanning the change), cancels and reschedules by key and id,
// retries publishes with their request ids, and consumes in two groups:
// the checker finds no lost, early or duplicated delivery beyond
// at-least-once, and a request retried across the change has one outcome
// (G6): while hand-overs are open a proxy splits it as before the change,
// and the old shard answers it from its dedup record.
func TestAddShardsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := framework.NewCluster(t, framework.Config{Shards: 8, LogLevel: "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	w, err := workload.New(ctx, workload.Config{Seed: 9, Topic: "grow", Partitions: 16, Duration: 20 * time.Second, Ops: 100_000}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })

	time.Sleep(6 * time.Second) // messages pending across the change
	conn, err := grpc.NewClient(c.ProxyAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	actx, acancel := context.WithTimeout(ctx, 60*time.Second)
	added, err := sundialv1.NewClusterClient(conn).AddShards(actx, &sundialv1.AddShardsRequest{Count: 8})
	acancel()
	if err != nil {
		t.Fatalf("AddShards(8) error = %v", err)
	}
	for _, s := range added.GetShards() {
		if s.GetStarting() {
			t.Fatalf("AddShards(8): shard %d still starting after the call", s.GetShardId())
		}
	}
	moved := 0
	for _, h := range added.GetHandovers() {
		if h.GetTopic() == "grow" {
			moved++
		}
	}
	t.Logf("added %d shards; %d partitions of grow hand over", len(added.GetShards()), moved)
	if len(added.GetShards()) != 8 || moved == 0 {
		t.Fatalf("AddShards(8) = %d shards, %d hand-overs of grow; want 8 and some", len(added.GetShards()), moved)
	}
	wg.Wait()
	check(t, w)
	if info, err := c.ClusterInfo(); err != nil || len(info.GetShards()) != 16 {
		t.Fatalf("ClusterInfo() = %d shards, %v; want 16", len(info.GetShards()), err)
	}
}
