package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/workload"
)

// wantCode fails unless err is a status of code whose message holds every
// one of mention.
func wantCode(t *testing.T, call string, err error, code codes.Code, mention ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s error = %v, want %s", call, err, code)
	}
	for _, m := range mention {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("%s error = %v, want it to mention %q", call, err, m)
		}
	}
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func nodeInfo(t *testing.T, c *Cluster, id uint64) *sundialv1.Node {
	t.Helper()
	for _, n := range clusterInfo(t, c).Nodes {
		if n.NodeId == id {
			return n
		}
	}
	t.Fatalf("node %d not in GetClusterInfo", id)
	return nil
}

// newDrainCluster starts 3 brokers with shards shards and joins a 4th (node
// 4, not a meta voter, so it is the one promoted when a voter is removed).
// Operation steps get generous timeouts: the machine is slow and moves run
// under traffic. It returns the cluster and a Cluster client through the
// proxy.
func newDrainCluster(t *testing.T, shards int) (*Cluster, sundialv1.ClusterClient) {
	t.Helper()
	c := New(t, Config{Shards: shards, Tune: func(bc *broker.Config) {
		bc.Operations.StepTimeout = 20 * time.Second
		bc.Operations.CatchUpTimeout = 60 * time.Second
	}})
	cfg := joinConfig(t, c, 0, seedsFollowerFirst(t, c)...)
	c.Nodes = append(c.Nodes, &Node{Config: cfg})
	c.StartBroker(3)
	return c, clusterClient(t, c.Proxy.GRPCAddr())
}

// initialMemberOtherThan is the lowest id of the 3 initial members that is
// not id.
func initialMemberOtherThan(id uint64) uint64 {
	if id == 1 {
		return 2
	}
	return 1
}

// drainUntilEmpty repeats DrainNode(id), as shardctl drain-node does, until
// the node holds no replica, leads no shard and no operation is pending.
func drainUntilEmpty(t *testing.T, cl sundialv1.ClusterClient, id uint64) {
	t.Helper()
	Eventually(t, 150*time.Second, func() error {
		ctx, cancel := callCtx()
		defer cancel()
		resp, err := cl.DrainNode(ctx, &sundialv1.DrainNodeRequest{NodeId: id})
		if err != nil {
			return err
		}
		if resp.RemainingReplicas+resp.RemainingLeaders+resp.PendingOperations > 0 {
			return fmt.Errorf("node %d still holds %d replicas, leads %d, %d operations pending", id,
				resp.RemainingReplicas, resp.RemainingLeaders, resp.PendingOperations)
		}
		return nil
	})
}

// waitMetaAnswers waits until the meta group, after voter stopped was
// stopped, commits again: creating topic succeeds (or finds it made by an
// earlier try).
func waitMetaAnswers(t *testing.T, c *Cluster, stopped uint64, topic string) {
	t.Helper()
	Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: topic}})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("meta group does not answer after stopping voter %d: %w", stopped, err)
		}
		return nil
	})
}

// TestDrainAndRemoveNodeUnderTraffic: 3 brokers and a 4th joined, under
// the recorded publish/consume workload. Node removal is refused with what
// to do (unknown id, id 0, a node not drained, --force on a live node, a
// draining node that still holds replicas); drain-node moves every replica
// and leadership off an initial member (a meta voter), remove-node then
// removes it, promoting the joined broker to meta voter in its place. The
// history checker finds nothing lost or early; the removed broker is
// refused when it starts again; and the meta group still answers after
// one of its remaining voters, its leader, is stopped.
//
// The drained node is not the meta leader and no rebalance runs before the
// drain, so the meta leader hosts every shard the drain moves (the
// executor changes membership through the meta leader's replicas).
func TestDrainAndRemoveNodeUnderTraffic(t *testing.T) {
	c, cl := newDrainCluster(t, 4)
	metaLeader := clusterInfo(t, c).MetaLeaderNodeId
	victim := initialMemberOtherThan(metaLeader)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := workload.New(ctx, workload.Config{Seed: 9, Duration: 40 * time.Second, Ops: 800, Rate: 20}, []string{c.Proxy.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	produced := make(chan struct{})
	go func() { defer close(produced); w.Run(ctx) }()

	rctx, rcancel := callCtx()
	defer rcancel()
	_, err = cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{})
	wantCode(t, "RemoveNode(0)", err, codes.InvalidArgument, "node_id")
	_, err = cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: 99})
	wantCode(t, "RemoveNode(99)", err, codes.NotFound, "node 99 is not a member")
	_, err = cl.DrainNode(rctx, &sundialv1.DrainNodeRequest{NodeId: 99})
	wantCode(t, "DrainNode(99)", err, codes.NotFound, "node 99 is not a member")
	_, err = cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: victim})
	wantCode(t, "RemoveNode(active node)", err, codes.FailedPrecondition, fmt.Sprintf("run shardctl drain-node %d first", victim))
	_, err = cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: victim, Force: true})
	wantCode(t, "RemoveNode(live node, force)", err, codes.FailedPrecondition, "--force is only for a dead or unreachable node")

	drain, err := cl.DrainNode(rctx, &sundialv1.DrainNodeRequest{NodeId: victim})
	if err != nil {
		t.Fatalf("DrainNode(%d) error = %v", victim, err)
	}
	if drain.GetNode().GetState() != sundialv1.NodeState_NODE_STATE_DRAINING || len(drain.GetOperations()) == 0 {
		t.Fatalf("DrainNode(%d) = %v, want the node draining and moves submitted", victim, drain)
	}
	_, err = cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: victim})
	wantCode(t, "RemoveNode(draining node)", err, codes.FailedPrecondition, fmt.Sprintf("node %d ", victim))

	// Repeat the drain (as shardctl drain-node does) until the node holds
	// nothing.
	drainUntilEmpty(t, cl, victim)
	for shard, on := range shards(t, cl) {
		if slices.Contains(on, victim) || len(on) != 3 {
			t.Fatalf("shard %d on nodes %v after draining node %d, want 3 replicas, none on it", shard, on, victim)
		}
	}
	for _, op := range waitEnded(t, cl, 60*time.Second) {
		if op.GetStatus() != "done" {
			t.Fatalf("drain operation %v, want done", op)
		}
	}

	// A proxy that follows the routing table from the victim must learn
	// that this broker's table stops changing once it is removed.
	watchCtx, watchCancel := context.WithCancel(context.Background())
	defer watchCancel()
	watch, err := clusterClient(t, c.Nodes[victim-1].Config.GRPCAddr).WatchRouting(watchCtx, &sundialv1.WatchRoutingRequest{})
	if err != nil {
		t.Fatalf("WatchRouting on node %d: %v", victim, err)
	}
	watchEnded := make(chan error, 1)
	go func() {
		for {
			if _, err := watch.Recv(); err != nil {
				watchEnded <- err
				return
			}
		}
	}()

	rm, err := cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: victim})
	if err != nil {
		t.Fatalf("RemoveNode(%d) of the drained node error = %v", victim, err)
	}
	if rm.GetNode().GetState() != sundialv1.NodeState_NODE_STATE_REMOVED || rm.GetPromotedMetaVoter() != 4 || !rm.GetLeftMetaGroup() {
		t.Fatalf("RemoveNode(%d) = %v, want it removed, out of the meta group, node 4 promoted", victim, rm)
	}
	if n := nodeInfo(t, c, 4); !n.MetaVoter {
		t.Fatalf("node 4 after the removal = %v, want a meta voter", n)
	}
	if again, err := cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: victim}); err != nil || again.GetNode().GetState() != sundialv1.NodeState_NODE_STATE_REMOVED {
		t.Fatalf("RemoveNode(%d) again = %v, %v; want the removed node answered again", victim, again, err)
	}
	// The removed broker stops its meta replica and says why.
	Eventually(t, 30*time.Second, func() error {
		if err := c.Nodes[victim-1].Server.Refusal(); !errors.Is(err, broker.ErrNodeRemoved) {
			return fmt.Errorf("removed broker's Refusal() = %w, want %w", err, broker.ErrNodeRemoved)
		}
		return nil
	})
	// Its routing streams end (a proxy then watches another broker)
	// instead of serving the table of the moment it was removed forever.
	select {
	case err := <-watchEnded:
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "removed") {
			t.Fatalf("WatchRouting on removed node %d ended with %v, want Unavailable saying it was removed", victim, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("WatchRouting on removed node %d still open 30s after its removal: a proxy watching it never sees another routing change", victim)
	}

	<-produced
	if pending := w.Drain(90 * time.Second); len(pending) > 0 {
		t.Logf("drain ended with %d deliveries outstanding", len(pending))
	}
	ops := w.Recorder().Ops()
	res := checker.Check(w.CheckerConfig(), ops)
	t.Logf("%s", res.Summary())
	if len(res.Violations) > 0 {
		t.Fatalf("%d violations across the drain and removal (history in %s):\n%s", len(res.Violations), framework.KeepHistory(t, ops), res)
	}
	w.Stop()

	// A removed broker that comes back is refused by its peers.
	c.StopBroker(int(victim - 1))
	if err := startRefused(t, c.Nodes[victim-1].Config); !errors.Is(err, broker.ErrNodeRemoved) || !strings.Contains(err.Error(), "never reused") {
		t.Fatalf("restart of removed node %d = %v, want %v saying its id is never reused", victim, err, broker.ErrNodeRemoved)
	}

	// The meta group has 3 voters again (the 2 left and node 4): it
	// survives losing one more, here its leader.
	c.StopBroker(int(metaLeader - 1))
	waitMetaAnswers(t, c, metaLeader, "after-removal")
	Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		return err
	})
}

// TestForceRemoveDeadNode: a stopped broker (a meta voter holding a
// replica of every shard) cannot be removed without --force, since it is
// not drained; with --force it is removed, the joined broker is promoted
// to meta voter in its place, and a rebalance re-creates every replica
// the dead node held, so each shard is back to 3 replicas, none on it.
// The meta group then survives losing another voter.
func TestForceRemoveDeadNode(t *testing.T) {
	c, cl := newDrainCluster(t, 2)
	publish(t, c, &sundialv1.Message{Topic: "dead", Payload: []byte("before the death")})
	metaLeader := clusterInfo(t, c).MetaLeaderNodeId
	dead := initialMemberOtherThan(metaLeader)
	c.StopBroker(int(dead - 1))
	c.WaitReady()

	rctx, rcancel := callCtx()
	defer rcancel()
	_, err := cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: dead})
	wantCode(t, "RemoveNode(dead node)", err, codes.FailedPrecondition, fmt.Sprintf("run shardctl drain-node %d first", dead))
	rm, err := cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: dead, Force: true})
	if err != nil {
		t.Fatalf("RemoveNode(%d, force) of a stopped broker error = %v", dead, err)
	}
	if rm.GetNode().GetState() != sundialv1.NodeState_NODE_STATE_REMOVED || rm.GetPromotedMetaVoter() != 4 {
		t.Fatalf("RemoveNode(%d, force) = %v, want it removed and node 4 promoted", dead, rm)
	}

	Eventually(t, 120*time.Second, func() error {
		ctx, cancel := callCtx()
		defer cancel()
		if _, err := cl.Rebalance(ctx, &sundialv1.RebalanceRequest{}); err != nil {
			return err
		}
		for shard, on := range shards(t, cl) {
			if slices.Contains(on, dead) || len(on) != 3 {
				return fmt.Errorf("shard %d on nodes %v, want 3 replicas, none on removed node %d", shard, on, dead)
			}
		}
		return nil
	})
	c.WaitReady()

	// Voters now: the two initial members left and node 4. Stop the
	// leader: the other two still answer.
	c.StopBroker(int(metaLeader - 1))
	waitMetaAnswers(t, c, metaLeader, "after-force")
}

// TestDrainAndRemoveMetaLeader: the broker leading the meta group (and
// running the executor) drains itself and is removed: it hands the meta
// leadership to another voter first, the new leader completes the
// removal and promotes the joined broker, and the cluster keeps 3 meta
// voters and 3 replicas of every shard, none on the removed node.
func TestDrainAndRemoveMetaLeader(t *testing.T) {
	c, cl := newDrainCluster(t, 2)
	leader := clusterInfo(t, c).MetaLeaderNodeId
	drainUntilEmpty(t, cl, leader)
	rctx, rcancel := callCtx()
	defer rcancel()
	rm, err := cl.RemoveNode(rctx, &sundialv1.RemoveNodeRequest{NodeId: leader})
	if err != nil {
		t.Fatalf("RemoveNode(%d) of the drained meta leader error = %v", leader, err)
	}
	if rm.GetNode().GetState() != sundialv1.NodeState_NODE_STATE_REMOVED || rm.GetPromotedMetaVoter() != 4 || !rm.GetLeftMetaGroup() {
		t.Fatalf("RemoveNode(%d) = %v, want it removed, out of the meta group, node 4 promoted", leader, rm)
	}
	info := clusterInfo(t, c)
	if info.MetaLeaderNodeId == leader {
		t.Fatalf("removed node %d still leads the meta group", leader)
	}
	voters := 0
	for _, n := range info.Nodes {
		if n.MetaVoter {
			voters++
		}
	}
	if voters != 3 {
		t.Fatalf("nodes after the removal = %v, want 3 meta voters", info.Nodes)
	}
	for shard, on := range shards(t, cl) {
		if slices.Contains(on, leader) || len(on) != 3 {
			t.Fatalf("shard %d on nodes %v, want 3 replicas, none on removed node %d", shard, on, leader)
		}
	}
}
