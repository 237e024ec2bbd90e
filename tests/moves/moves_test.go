// Package moves runs replica moves on a process cluster under recorded
// traffic: brokers join, rebalances move replicas and leaderships (through
// the brokers hosting each shard when the meta leader holds no replica of
// it), and faults hit the meta leader or a move's target midway. The
// history checker (package checker) judges every delivery.
package moves

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// operationsYAML keeps moves short: a step has 15 s, a catch-up the
// duration given.
const operationsYAML = `operations:
  max_running: 4
  step_timeout: 15s
  catch_up_timeout: %s
`

// start runs brokers processes with short operation timeouts (catchUp for
// a catch-up), a proxy and a recording workload (consumers started, no
// producers) on topic.
func start(t *testing.T, brokers, shards int, catchUp time.Duration, topic string) (*framework.Cluster, *workload.Workload, sundialv1.ClusterClient, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and moves replicas")
	}
	cfgPath := filepath.Join(t.TempDir(), "operations.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, operationsYAML, catchUp), 0o644); err != nil {
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
// rebalance plans nothing, and answers every operation that ran. An
// operation that ends other than done (ids in known excepted) fails t at
// once: the next rebalance would only plan it again.
func rebalance(t *testing.T, cl sundialv1.ClusterClient, timeout time.Duration, known map[uint64]bool) []*sundialv1.Operation {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cl.Rebalance(ctx, &sundialv1.RebalanceRequest{})
		cancel()
		if err == nil && len(resp.GetOperations()) == 0 {
			return operations(t, cl)
		}
		for _, op := range operations(t, cl) {
			if !known[op.GetOperationId()] && op.GetStatus() != "done" && op.GetStatus() != "pending" && op.GetStatus() != "running" {
				t.Fatalf("operation %d %s of shard %d (%d -> %d) ended %s: %s", op.GetOperationId(), op.GetKind(), op.GetShardId(),
					op.GetFromNodeId(), op.GetToNodeId(), op.GetStatus(), op.GetError())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebalance not finished after %v (last answer %v, %v)", timeout, resp, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
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
		t.Errorf("violations (history in %s):\n%s", framework.KeepHistory(t, ops), res)
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
// hold 10,000 pending messages (due 25-45 s after their publish); a 4th
// broker joins and a rebalance runs, then a 5th and another: each runs
// Rebalance until nothing is left to plan. The first rebalance leaves the
// meta leader without replicas of some shards, which the second moves or
// hands leadership of: the executor changes those through their hosts.
// Then replicas and leaders per node differ by at most 1, every operation
// is done (none rolled back), and the checker finds every message
// delivered once due, none early, none lost.
func TestGrowThreeToFiveAndRebalance(t *testing.T) {
	const topic = "grow"
	c, w, cl, ctx := start(t, 3, 8, 40*time.Second, topic)
	began := time.Now()
	publishPending(ctx, t, w, topic, 10000, 25*time.Second, 20*time.Second)
	t.Logf("10000 messages published in %v", time.Since(began).Round(time.Millisecond))
	var ops []*sundialv1.Operation
	for range 2 {
		id, err := c.Join(90 * time.Second)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		t.Logf("broker %d joined at %v", id, time.Since(began).Round(time.Millisecond))
		ops = rebalance(t, cl, 2*time.Minute, nil)
		t.Logf("rebalanced at %v: %d operations in all", time.Since(began).Round(time.Millisecond), len(ops))
	}
	for _, op := range ops {
		t.Logf("operation %d %s shard %d %d->%d: %s %s", op.GetOperationId(), op.GetKind(), op.GetShardId(), op.GetFromNodeId(), op.GetToNodeId(), op.GetStatus(), op.GetError())
	}
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
	// Leadership transfers go to each shard's leader, and changes of the
	// shards the meta leader lost go to their hosts: over the Peer service.
	if n := peerCalls(c); n == 0 {
		t.Errorf("no change was made through a peer (sundial_operator_peer_calls_total{result=\"ok\"} = 0)")
	} else {
		t.Logf("%d changes made through peers", n)
	}
	check(t, w, 2*time.Minute)
}

// peerCalls sums sundial_operator_peer_calls_total{result="ok"} over the
// running brokers' /metrics.
func peerCalls(c *framework.Cluster) int {
	var n int
	for _, b := range c.Brokers {
		resp, err := http.Get("http://" + b.MetricsAddr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(line, "sundial_operator_peer_calls_total{") || !strings.Contains(line, `result="ok"`) {
				continue
			}
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += int(v)
		}
	}
	return n
}

// metaLeader is the node leading the meta group as the proxy reports it.
func metaLeader(t *testing.T, c *framework.Cluster, not int) int {
	t.Helper()
	var id int
	framework.WaitFor(t, 60*time.Second, func() error {
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		id = int(info.GetMetaLeaderNodeId())
		if id == 0 || id == not {
			return fmt.Errorf("meta leader %d", id)
		}
		return nil
	})
	return id
}

// waitStep polls the operations until one of ids runs at step index at
// least from, and answers them all as seen then.
func waitStep(t *testing.T, cl sundialv1.ClusterClient, ids map[uint64]bool, from int32) map[uint64]*sundialv1.Operation {
	t.Helper()
	var seen map[uint64]*sundialv1.Operation
	framework.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		if err != nil {
			return err
		}
		seen = map[uint64]*sundialv1.Operation{}
		mid := false
		for _, op := range resp.GetOperations() {
			if !ids[op.GetOperationId()] {
				continue
			}
			seen[op.GetOperationId()] = op
			if op.GetStatus() == "running" && op.GetCurrentStep() >= from {
				mid = true
			}
		}
		if !mid {
			return fmt.Errorf("no operation running at step %d or later: %v", from, seen)
		}
		return nil
	})
	return seen
}

// submit runs one Rebalance and answers the ids it submitted.
func submit(t *testing.T, cl sundialv1.ClusterClient) map[uint64]bool {
	t.Helper()
	ids := map[uint64]bool{}
	framework.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.Rebalance(ctx, &sundialv1.RebalanceRequest{})
		if err != nil {
			return err
		}
		if resp.GetRunning() || len(resp.GetOperations()) == 0 {
			return fmt.Errorf("rebalance submitted nothing: %v", resp)
		}
		for _, op := range resp.GetOperations() {
			ids[op.GetOperationId()] = true
		}
		return nil
	})
	return ids
}

// TestKillMetaLeaderMidRebalance SIGKILLs the meta leader while a
// rebalance's operations run (one past its first step), restarts it once
// another broker leads meta: the new meta leader's executor resumes every
// operation at its persisted step and each ends done; later rebalances
// balance the cluster; no message is lost or early.
func TestKillMetaLeaderMidRebalance(t *testing.T) {
	const topic = "kill-meta"
	c, w, cl, ctx := start(t, 3, 4, 40*time.Second, topic)
	publishPending(ctx, t, w, topic, 3000, 15*time.Second, 15*time.Second)
	var joined []int
	for range 2 {
		id, err := c.Join(90 * time.Second)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		joined = append(joined, id)
	}
	old := metaLeader(t, c, 0)
	ids := submit(t, cl)
	// Hold the moves at wait-catch-up until the kill: the joined brokers
	// they copy onto are frozen, so their learners cannot report catching
	// up (unheld, a move of these small shards once finished within 0.7 s,
	// before the poll below saw one running).
	for _, id := range joined {
		if err := c.Pause(id); err != nil {
			t.Fatal(err)
		}
	}
	at := waitStep(t, cl, ids, 1)
	if err := c.Kill(old); err != nil {
		t.Fatal(err)
	}
	for _, id := range joined {
		if err := c.Resume(id); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed meta leader %d with operations at %s (brokers %v paused until then)", old, steps(at), joined)
	now := metaLeader(t, c, old)
	t.Logf("node %d leads meta", now)
	if err := c.Restart(old); err != nil {
		t.Fatal(err)
	}
	byID := map[uint64]*sundialv1.Operation{}
	for _, op := range rebalance(t, cl, 3*time.Minute, nil) {
		byID[op.GetOperationId()] = op
	}
	for id := range ids {
		if op := byID[id]; op.GetStatus() != "done" {
			t.Errorf("operation %d after the meta leader's kill = %v, want done (at the kill: %s)", id, op, steps(map[uint64]*sundialv1.Operation{id: at[id]}))
		}
	}
	framework.WaitFor(t, 30*time.Second, func() error {
		_, _, err := spread(cl, nodeIDs(5))
		return err
	})
	check(t, w, 2*time.Minute)
}

// TestMoveTargetDiesMidway: the moves of a rebalance onto a joined broker
// have added their learners when the broker is killed (it was cut off, so
// none caught up); each move times out at wait-catch-up and ends rolled
// back with that step named in ListOperations, its shard keeps the
// replicas it had, and once the broker is back a rebalance completes.
func TestMoveTargetDiesMidway(t *testing.T) {
	const topic = "target-dies"
	// The target is isolated before the rebalance is planned (so it catches
	// up on nothing): keep the meta leader from judging it suspect (3 s
	// unheard by default) before the plan names it. The brokers inherit it.
	t.Setenv("SUNDIAL_SUSPECT_NODE_TIMEOUT", "1h")
	c, w, cl, ctx := start(t, 3, 4, 10*time.Second, topic)
	publishPending(ctx, t, w, topic, 3000, 20*time.Second, 15*time.Second)
	target, err := c.Join(90 * time.Second)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	before := placement(t, cl)
	c.Isolate(target) // no catch-up before the kill
	ids := submit(t, cl)
	waitStep(t, cl, ids, 1)
	if err := c.Kill(target); err != nil {
		t.Fatal(err)
	}
	c.Heal()
	ended := map[uint64]*sundialv1.Operation{}
	framework.WaitFor(t, 90*time.Second, func() error {
		for _, op := range operations(t, cl) {
			if ids[op.GetOperationId()] {
				ended[op.GetOperationId()] = op
				if op.GetStatus() == "pending" || op.GetStatus() == "running" {
					return fmt.Errorf("operation %d %s at step %d", op.GetOperationId(), op.GetStatus(), op.GetCurrentStep())
				}
			}
		}
		return nil
	})
	for id, op := range ended {
		t.Logf("operation %d %s of shard %d to node %d: %s: %s", id, op.GetKind(), op.GetShardId(), op.GetToNodeId(), op.GetStatus(), op.GetError())
		if op.GetStatus() != "rolled-back" || !strings.Contains(op.GetError(), "wait-catch-up") {
			t.Errorf("operation %d with its target killed = %v, want rolled-back at wait-catch-up", id, op)
		}
	}
	if after := placement(t, cl); !maps.EqualFunc(after, before, slices.Equal) {
		t.Errorf("replicas after the roll back = %v, want %v", after, before)
	}
	if err := c.Restart(target); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	var later []*sundialv1.Operation
	for _, op := range rebalance(t, cl, 3*time.Minute, ids) {
		if !ids[op.GetOperationId()] {
			later = append(later, op)
		}
	}
	if bad := notDone(later); len(bad) > 0 || len(later) == 0 {
		t.Errorf("rebalance after the target's return: not done %v (of %d)", bad, len(later))
	}
	framework.WaitFor(t, 30*time.Second, func() error {
		_, _, err := spread(cl, nodeIDs(4))
		return err
	})
	check(t, w, 2*time.Minute)
}

// placement maps each shard to its replicas' nodes, sorted.
func placement(t *testing.T, cl sundialv1.ClusterClient) map[uint64][]uint64 {
	t.Helper()
	out := map[uint64][]uint64{}
	framework.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.ListShards(ctx, &sundialv1.ListShardsRequest{})
		if err != nil {
			return err
		}
		for _, s := range resp.GetShards() {
			var nodes []uint64
			for _, r := range s.GetReplicas() {
				nodes = append(nodes, r.GetNodeId())
			}
			slices.Sort(nodes)
			out[s.GetShardId()] = nodes
		}
		return nil
	})
	return out
}

// steps says where each operation is: id, kind, shard, status, step.
func steps(ops map[uint64]*sundialv1.Operation) string {
	ids := slices.Sorted(maps.Keys(ops))
	var sb strings.Builder
	for _, id := range ids {
		op := ops[id]
		step := "-"
		if i := int(op.GetCurrentStep()); i < len(op.GetSteps()) {
			step = op.GetSteps()[i].GetKind()
		}
		fmt.Fprintf(&sb, "[%d %s shard %d %s at %d %s] ", id, op.GetKind(), op.GetShardId(), op.GetStatus(), op.GetCurrentStep(), step)
	}
	return sb.String()
}
