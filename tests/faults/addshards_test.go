package faults

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/history"
	"github.com/sundialmq/sundial/tests/workload"
)

// TestAddShardsUnderLoad grows a 3-broker process cluster from 8 to 16
// shards while the recorded workload publishes (keyed and unkeyed, with
// delays spanning the change), cancels and reschedules by key and id,
// retries publishes with their request ids, and consumes in two groups:
// the checker finds no lost, early or duplicated delivery beyond
// at-least-once (G1-G5).
//
// G6 holds except for one known limit (docs/operations.md, "Adding
// shards"): a request first sent before the ring changed and retried
// after it is split by the new ring, so its part for a new shard is
// stored again there (or its old shard, sent fewer messages under the
// same id, refuses the retry). Those violations are counted and logged;
// a G6 violation of any other shape fails the test.
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
	grownAt := time.Now()
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
	checkAcrossGrowth(t, w, grownAt)
	if info, err := c.ClusterInfo(); err != nil || len(info.GetShards()) != 16 {
		t.Fatalf("ClusterInfo() = %d shards, %v; want 16", len(info.GetShards()), err)
	}
}

// checkAcrossGrowth drains and checks w's history like check, but counts
// (and logs) rather than fails the G6 violations of a request first sent
// before grownAt and retried after it.
func checkAcrossGrowth(t *testing.T, w *workload.Workload, grownAt time.Time) {
	t.Helper()
	w.Drain(90 * time.Second)
	ops := w.Recorder().Ops()
	bySeq := make(map[int]history.Op, len(ops))
	for _, op := range ops {
		bySeq[op.Seq] = op
	}
	res := checker.Check(w.CheckerConfig(), ops)
	t.Logf("checked: %s", res.Summary())
	spanning := 0
	var other []checker.Violation
	for _, v := range res.Violations {
		if v.Property == "G6" && len(v.Seqs) == 2 && bySeq[v.Seqs[0]].Invoke.Before(grownAt) && bySeq[v.Seqs[1]].Invoke.After(grownAt) {
			spanning++
			continue
		}
		other = append(other, v)
	}
	if spanning > 0 {
		t.Logf("known limit: %d G6 answers of requests retried across the ring change", spanning)
	}
	if len(other) > 0 {
		path := filepath.Join(t.TempDir(), "history.jsonl")
		if f, err := os.Create(path); err == nil {
			_ = history.WriteJSON(f, ops)
			f.Close()
		}
		t.Errorf("%d violations (history in %s):\n%s", len(other), path, checker.Result{Violations: other})
	}
}
