package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/workload"
)

// deadNodeTimeout is the brokers' dead_node_timeout in the healing test:
// long enough that a pause well below it is told apart on a noisy machine,
// short enough to keep the test quick.
const deadNodeTimeout = 8 * time.Second

// TestDeadBrokerIsReplaced: 3 brokers and a 4th that joined (so a live
// node without replicas exists), messages pending with delays spread over
// the whole scenario. One initial broker that does not lead meta (so the
// meta leader hosts every shard to repair) is first paused for a quarter
// of dead_node_timeout: it is not declared dead and nothing is repaired.
// Then it is killed for good: after the timeout it is dead in
// GetClusterInfo, its replicas are re-created on the joined broker by
// add-replica repairs that end done (ListOperations), every shard has 3
// replicas on live nodes and a leader, the replicas agree, and every
// message published before the kill is delivered, none early (checker).
// Restarted on its data dir, it is declared alive again and runs none of
// the replicas re-created elsewhere.
func TestDeadBrokerIsReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	t.Setenv("SUNDIAL_DEAD_NODE_TIMEOUT", deadNodeTimeout.String()) // the brokers inherit it
	c := framework.NewCluster(t, framework.Config{Shards: 2, LogLevel: "warn"})
	joined, err := c.Join(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	const topic = "heal"
	w, err := workload.New(ctx, workload.Config{Seed: 1, Topic: topic, Partitions: 4}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	for i := range 40 {
		msgs := make([]*sundialv1.Message, 5)
		for j := range msgs {
			msgs[j] = &sundialv1.Message{Topic: topic, Payload: fmt.Appendf(nil, "heal-%d-%d", i, j), DelayMs: int64(1000 + 700*i)}
		}
		w.Publish(ctx, "producer", msgs...)
	}
	if ids := published(w); len(ids) < 150 {
		t.Fatalf("%d of 200 publishes answered", len(ids))
	}

	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	victim := 0
	for id := 1; id <= 3; id++ {
		if uint64(id) != info.GetMetaLeaderNodeId() && victim == 0 {
			victim = id
		}
	}
	if info.GetMetaLeaderNodeId() == 0 || victim == 0 {
		t.Fatalf("meta leader %d: no broker to kill", info.GetMetaLeaderNodeId())
	}
	t.Logf("meta leader %d, victim %d, joined %d", info.GetMetaLeaderNodeId(), victim, joined)

	conn, err := grpc.NewClient(c.ProxyAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := sundialv1.NewClusterClient(conn)
	nodeState := func() (sundialv1.NodeState, error) {
		info, err := c.ClusterInfo()
		if err != nil {
			return 0, err
		}
		for _, n := range info.GetNodes() {
			if n.GetNodeId() == uint64(victim) {
				return n.GetState(), nil
			}
		}
		return 0, fmt.Errorf("node %d not in the cluster info", victim)
	}

	// A pause below the timeout: never dead, nothing repaired, through a
	// full timeout (plus slack) after the pause began.
	paused := time.Now()
	if err := c.Pause(victim); err != nil {
		t.Fatal(err)
	}
	time.Sleep(deadNodeTimeout / 4)
	if err := c.Resume(victim); err != nil {
		t.Fatal(err)
	}
	for time.Since(paused) < deadNodeTimeout+4*time.Second {
		if st, err := nodeState(); err == nil && st != sundialv1.NodeState_NODE_STATE_ACTIVE {
			t.Fatalf("node %d paused for %v (dead_node_timeout %v) is %v, want active", victim, deadNodeTimeout/4, deadNodeTimeout, st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	ops, err := cl.ListOperations(lctx, &sundialv1.ListOperationsRequest{})
	lcancel()
	if err != nil {
		t.Fatalf("ListOperations after a short pause: %v", err)
	}
	for _, op := range ops.GetOperations() {
		if op.GetShardId() != 0 { // the workload's group changes are admin operations: no shard of their own
			t.Fatalf("ListOperations after a short pause = %v; want no replica operations", ops)
		}
	}

	// Killed for good: declared dead, repaired.
	killed := time.Now()
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, 90*time.Second, func() error {
		st, err := nodeState()
		if err != nil {
			return err
		}
		if st != sundialv1.NodeState_NODE_STATE_DEAD {
			return fmt.Errorf("node %d is %v", victim, st)
		}
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		return repairedAway(info, uint64(victim))
	})
	healed := time.Since(killed)
	if healed < deadNodeTimeout {
		t.Fatalf("repaired %v after the kill, before dead_node_timeout %v", healed, deadNodeTimeout)
	}
	lctx, lcancel = context.WithTimeout(ctx, 10*time.Second)
	ops, err = cl.ListOperations(lctx, &sundialv1.ListOperationsRequest{})
	lcancel()
	if err != nil {
		t.Fatalf("ListOperations after the repair: %v", err)
	}
	repairs := 0
	for _, op := range ops.GetOperations() {
		if op.GetShardId() == 0 {
			continue // an admin operation of the workload
		}
		repairs++
		if op.GetKind() != "add-replica" || op.GetReason() != "repair" || op.GetFromNodeId() != uint64(victim) ||
			op.GetToNodeId() != uint64(joined) || op.GetStatus() != "done" {
			t.Fatalf("operation %v, want a done add-replica repair from node %d to node %d", op, victim, joined)
		}
	}
	if repairs != 2 {
		t.Fatalf("ListOperations after the repair = %v; want 2 repairs", ops)
	}
	t.Logf("repaired %v after the kill", healed.Round(100*time.Millisecond))
	check(t, w)
	framework.WaitFor(t, 60*time.Second, c.ReplicasAgree)

	// Back on its data dir: declared alive, and it runs none of the
	// replicas re-created elsewhere while it was dead.
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, 60*time.Second, func() error {
		st, err := nodeState()
		if err != nil {
			return err
		}
		if st != sundialv1.NodeState_NODE_STATE_ACTIVE {
			return fmt.Errorf("restarted node %d is %v", victim, st)
		}
		for shard, by := range c.StateHashes() {
			if _, ok := by[victim]; ok {
				return fmt.Errorf("restarted node %d still runs a replica of shard %s", victim, shard)
			}
		}
		return nil
	})
}

// TestForceRemovedBrokerIsRepaired: 3 brokers and a 4th that joined; one
// initial broker that does not lead meta is killed and at once removed
// with remove-node --force, long before dead_node_timeout (10 minutes
// here) could declare it dead. The healer repairs its replicas as it does
// a dead node's: every shard gets 3 replicas on live nodes and a leader
// through add-replica repairs from the removed node that end done, and
// the replicas agree. (Before, nothing repaired them until a manual
// rebalance.)
func TestForceRemovedBrokerIsRepaired(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	t.Setenv("SUNDIAL_DEAD_NODE_TIMEOUT", "10m") // the brokers inherit it: nobody is declared dead here
	c := framework.NewCluster(t, framework.Config{Shards: 2, LogLevel: "warn"})
	joined, err := c.Join(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	victim := 0
	for id := 1; id <= 3; id++ {
		if uint64(id) != info.GetMetaLeaderNodeId() && victim == 0 {
			victim = id
		}
	}
	if info.GetMetaLeaderNodeId() == 0 || victim == 0 {
		t.Fatalf("meta leader %d: no broker to kill", info.GetMetaLeaderNodeId())
	}
	conn, err := grpc.NewClient(c.ProxyAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := sundialv1.NewClusterClient(conn)
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	// Refused while the killed broker still counts as answering (the
	// meta leader probes it), then done.
	framework.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := cl.RemoveNode(ctx, &sundialv1.RemoveNodeRequest{NodeId: uint64(victim), Force: true})
		return err
	})
	framework.WaitFor(t, 3*time.Minute, func() error {
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		return repairedAway(info, uint64(victim))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ops, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
	cancel()
	if err != nil {
		t.Fatalf("ListOperations after the repair: %v", err)
	}
	repairs := 0
	for _, op := range ops.GetOperations() {
		if op.GetShardId() == 0 {
			continue // an admin operation
		}
		repairs++
		if op.GetKind() != "add-replica" || op.GetReason() != "repair" || op.GetFromNodeId() != uint64(victim) ||
			op.GetToNodeId() != uint64(joined) || op.GetStatus() != "done" {
			t.Fatalf("operation %v, want a done add-replica repair from removed node %d to node %d", op, victim, joined)
		}
	}
	if repairs != 2 {
		t.Fatalf("ListOperations after the repair = %v; want 2 repairs", ops)
	}
	framework.WaitFor(t, 60*time.Second, c.ReplicasAgree)
}

// repairedAway says every shard has three replicas, none on node gone, and
// a leader; else it names the first shard that has not.
func repairedAway(info *sundialv1.ClusterInfo, gone uint64) error {
	for _, s := range info.GetShards() {
		var nodes []uint64
		for _, r := range s.GetReplicas() {
			nodes = append(nodes, r.GetNodeId())
		}
		if len(nodes) != 3 || slices.Contains(nodes, gone) || s.GetLeaderNodeId() == 0 {
			return fmt.Errorf("shard %d on nodes %v, leader %d", s.GetShardId(), nodes, s.GetLeaderNodeId())
		}
	}
	return nil
}
