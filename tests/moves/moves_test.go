// Package moves runs replica moves on a process cluster under recorded
// traffic: brokers join, rebalances move replicas and leaderships (through
// the brokers hosting each shard when the meta leader holds no replica of
// it), and faults hit the meta leader or a move's target midway. The
// history checker (package checker) judges every delivery.
package moves

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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

// operationsYAML keeps moves short: a step has 15 s, a catch-up 40 s.
const operationsYAML = `operations:
  max_running: 4
  step_timeout: 15s
  catch_up_timeout: 40s
`

// start runs brokers processes with short operation timeouts, a proxy and
// a recording workload (consumers started, no producers) on topic.
func start(t *testing.T, brokers, shards int, topic string) (*framework.Cluster, *workload.Workload, sundialv1.ClusterClient, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and moves replicas")
	}
	cfgPath := filepath.Join(t.TempDir(), "operations.yaml")
	if err := os.WriteFile(cfgPath, []byte(operationsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	c := framework.NewCluster(t, framework.Config{Brokers: brokers, Shards: shards, BrokerArgs: []string{"--config", cfgPath}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	w, err := workload.New(ctx, workload.Config{Seed: 9, Topic: topic, Partitions: 8, Groups: []string{"default"}}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	conn, err := grpc.NewClient(c.ProxyAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return c, w, sundialv1.NewClusterClient(conn), ctx
}

// publishPending publishes n messages in batches of 100, due between
// minDelay and minDelay+spread from their publish, from 4 producers.
func publishPending(ctx context.Context, t *testing.T, w *workload.Workload, topic string, n int, minDelay, spread time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 7))
			for b := p; b < n/100; b += 4 {
				msgs := make([]*sundialv1.Message, 100)
				for i := range msgs {
					delay := minDelay + time.Duration(rng.Int64N(int64(spread)))
					msgs[i] = &sundialv1.Message{Topic: topic, Payload: fmt.Appendf(nil, "pending-%d-%d", b, i), DelayMs: delay.Milliseconds()}
				}
				w.Publish(ctx, fmt.Sprintf("producer-%d", p), msgs...)
			}
		})
	}
	wg.Wait()
	var ok int
	for _, op := range w.Recorder().Ops() {
		if op.Kind == history.Publish && op.Answer == history.OK {
			ok++
		}
	}
	if ok < n/100*9/10 {
		t.Fatalf("%d of %d publishes answered", ok, n/100)
	}
}

// rebalance runs Rebalance until no operation is unfinished and a new
// rebalance plans nothing, and answers every operation that ran.
func rebalance(t *testing.T, cl sundialv1.ClusterClient, timeout time.Duration) []*sundialv1.Operation {
	t.Helper()
	framework.WaitFor(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.Rebalance(ctx, &sundialv1.RebalanceRequest{})
		if err != nil {
			return fmt.Errorf("rebalance: %w", err)
		}
		if len(resp.GetOperations()) > 0 {
			return fmt.Errorf("rebalance: %d operations running (running=%v)", len(resp.GetOperations()), resp.GetRunning())
		}
		return nil
	})
	return operations(t, cl)
}

func operations(t *testing.T, cl sundialv1.ClusterClient) []*sundialv1.Operation {
	t.Helper()
	var ops []*sundialv1.Operation
	framework.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		ops = resp.GetOperations()
		return err
	})
	return ops
}

// spread counts replicas and leaders per node (every node in nodes, 0
// included) and answers an error unless both are balanced (max-min <= 1).
func spread(cl sundialv1.ClusterClient, nodes []uint64) (replicas, leaders map[uint64]int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.ListShards(ctx, &sundialv1.ListShardsRequest{})
	if err != nil {
		return nil, nil, err
	}
	replicas, leaders = map[uint64]int{}, map[uint64]int{}
	for _, n := range nodes {
		replicas[n], leaders[n] = 0, 0
	}
	for _, s := range resp.GetShards() {
		if s.GetLeaderNodeId() == 0 {
			return replicas, leaders, fmt.Errorf("shard %d has no known leader", s.GetShardId())
		}
		leaders[s.GetLeaderNodeId()]++
		for _, r := range s.GetReplicas() {
			replicas[r.GetNodeId()]++
		}
	}
	if d := maxMinusMin(replicas); d > 1 {
		return replicas, leaders, fmt.Errorf("replicas per node %v: max-min %d", replicas, d)
	}
	if d := maxMinusMin(leaders); d > 1 {
		return replicas, leaders, fmt.Errorf("leaders per node %v: max-min %d", leaders, d)
	}
	return replicas, leaders, nil
}

func maxMinusMin(m map[uint64]int) int {
	var vs []int
	for _, v := range m {
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return 0
	}
	return slices.Max(vs) - slices.Min(vs)
}

// notDone lists the operations that did not end done.
func notDone(ops []*sundialv1.Operation) []*sundialv1.Operation {
	var out []*sundialv1.Operation
	for _, op := range ops {
		if op.GetStatus() != "done" {
			out = append(out, op)
		}
	}
	return out
}

// check drains, checks the whole history and fails t on any violation.
func check(t *testing.T, w *workload.Workload, drain time.Duration) checker.Result {
	t.Helper()
	w.Drain(drain)
	ops := w.Recorder().Ops()
	res := checker.Check(w.CheckerConfig(), ops)
	t.Logf("checked: %s", res.Summary())
	if len(res.Violations) > 0 {
		path := filepath.Join(t.TempDir(), "history.jsonl")
		if f, err := os.Create(path); err == nil {
			_ = history.WriteJSON(f, ops)
			f.Close()
		}
		t.Errorf("violations (history in %s):\n%s", path, res)
	}
	return res
}

func nodeIDs(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// TestGrowThreeToFiveAndRebalance is issue 9's acceptance test: 3 brokers
// hold 10,000 pending messages (due 25-45 s after their publish); 2 more
// brokers join; rebalances run until nothing is left to plan. Then
// replicas and leaders per node differ by at most 1, every operation is
// done (none rolled back: the meta leader, which ends up without replicas
// of some shards, changes those through their hosts), and the checker
// finds every message delivered once due, none early, none lost.
func TestGrowThreeToFiveAndRebalance(t *testing.T) {
	const topic = "grow"
	c, w, cl, ctx := start(t, 3, 4, topic)
	began := time.Now()
	publishPending(ctx, t, w, topic, 10000, 25*time.Second, 20*time.Second)
	t.Logf("10000 messages published in %v", time.Since(began).Round(time.Millisecond))
	for range 2 {
		id, err := c.Join(90 * time.Second)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		t.Logf("broker %d joined at %v", id, time.Since(began).Round(time.Millisecond))
	}
	ops := rebalance(t, cl, 3*time.Minute)
	t.Logf("rebalanced at %v: %d operations", time.Since(began).Round(time.Millisecond), len(ops))
	if bad := notDone(ops); len(bad) > 0 || len(ops) == 0 {
		t.Errorf("operations not done: %v (of %d)", bad, len(ops))
	}
	// The routing table's leaders settle within leader gossip's second.
	var replicas, leaders map[uint64]int
	framework.WaitFor(t, 20*time.Second, func() error {
		var err error
		replicas, leaders, err = spread(cl, nodeIDs(5))
		return err
	})
	t.Logf("replicas per node %v, leaders per node %v", replicas, leaders)
	check(t, w, 2*time.Minute)
}
