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

// addShardsDeath is the set-up of the tests of a broker that dies while
// shards are added: a cluster with a short dead_node_timeout, the workload
// set up on topic with messages pending across the change.
func addShardsDeath(t *testing.T, topic string, join bool) (*framework.Cluster, *workload.Workload, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	t.Setenv("SUNDIAL_DEAD_NODE_TIMEOUT", deadNodeTimeout.String()) // the brokers inherit it
	c := framework.NewCluster(t, framework.Config{Shards: 2, LogLevel: "warn"})
	if join {
		if _, err := c.Join(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	w, err := workload.New(ctx, workload.Config{Seed: 5, Topic: topic, Partitions: 8}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	for i := range 30 {
		msgs := make([]*sundialv1.Message, 5)
		for j := range msgs {
			msgs[j] = &sundialv1.Message{Topic: topic, Payload: fmt.Appendf(nil, "%s-%d-%d", topic, i, j), DelayMs: int64(1000 + 800*i)}
		}
		w.Publish(ctx, "producer", msgs...)
	}
	if ids := published(w); len(ids) < 110 {
		t.Fatalf("%d of 150 publishes answered", len(ids))
	}
	return c, w, ctx
}

// addWithVictim pauses victim when pause is set (so the replicas
// add_shards places on it never start: it is still active when the shards
// are placed), adds count shards, kills victim for good as soon as they
// are placed and answers the new shards' ids and which
// of them have a replica on victim.
//
// AddShards goes to a live broker, not through the proxy: the proxy's
// calls that any broker answers (forward.Any) wait on a stopped broker
// for the whole forward timeout instead of trying the next one, so through
// the proxy AddShards fails Unavailable while a broker is stopped.
func addWithVictim(t *testing.T, c *framework.Cluster, victim, count int, pause bool) (added, onVictim []uint64) {
	t.Helper()
	via := c.Brokers[0]
	if via.ID == victim {
		via = c.Brokers[1]
	}
	conn, err := grpc.NewClient(via.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := sundialv1.NewClusterClient(conn)
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	old := map[uint64]bool{}
	for _, s := range info.GetShards() {
		old[s.GetShardId()] = true
	}
	if pause {
		if err := c.Pause(victim); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		resp *sundialv1.AddShardsResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		actx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := cl.AddShards(actx, &sundialv1.AddShardsRequest{Count: int32(count)})
		done <- answer{resp, err}
	}()
	// Killed once the new shards are placed, before they serve.
	var before int
	var early *answer
	framework.WaitFor(t, 60*time.Second, func() error {
		if early == nil {
			select {
			case a := <-done:
				early = &a
				t.Logf("AddShards(%d) answered before the shards were seen placed: %v, %v", count, a.resp, a.err)
			default:
			}
		}
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		if len(info.GetShards()) < len(old)+count {
			return fmt.Errorf("%d shards", len(info.GetShards()))
		}
		added, onVictim, before = nil, nil, 0
		for _, s := range info.GetShards() {
			if old[s.GetShardId()] {
				continue
			}
			added = append(added, s.GetShardId())
			if s.GetStarting() {
				before++
			}
			for _, r := range s.GetReplicas() {
				if r.GetNodeId() == uint64(victim) {
					onVictim = append(onVictim, s.GetShardId())
				}
			}
		}
		return nil
	})
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("added shards %v (%d starting when node %d was killed); on node %d: %v", added, before, victim, victim, onVictim)
	if len(onVictim) == 0 {
		t.Fatalf("no new shard placed on node %d", victim)
	}
	var a answer
	if early != nil {
		a = *early
	} else {
		a = <-done
	}
	if a.err != nil {
		t.Fatalf("AddShards(%d) with node %d down: %v", count, victim, a.err)
	}
	for _, s := range a.resp.GetShards() {
		if s.GetStarting() {
			t.Errorf("AddShards(%d): shard %d still starting after the call (node %d down): a shard with a quorum should serve", count, s.GetShardId(), victim)
		}
	}
	return added, onVictim
}

// allReplicated waits until victim is dead and every shard has 3 replicas
// on live nodes, a leader, and serves.
func allReplicated(t *testing.T, c *framework.Cluster, victim int, within time.Duration) {
	t.Helper()
	framework.WaitFor(t, within, func() error {
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		for _, n := range info.GetNodes() {
			if n.GetNodeId() == uint64(victim) && n.GetState() != sundialv1.NodeState_NODE_STATE_DEAD {
				return fmt.Errorf("node %d is %v", victim, n.GetState())
			}
		}
		for _, s := range info.GetShards() {
			var nodes []uint64
			for _, r := range s.GetReplicas() {
				nodes = append(nodes, r.GetNodeId())
			}
			if s.GetStarting() || len(nodes) != 3 || slices.Contains(nodes, uint64(victim)) || s.GetLeaderNodeId() == 0 {
				return fmt.Errorf("shard %d on nodes %v, leader %d, starting %v", s.GetShardId(), nodes, s.GetLeaderNodeId(), s.GetStarting())
			}
		}
		return nil
	})
}

// TestAddShardsBrokerDies: 3 brokers and a 4th that joined; the joined one
// (the least loaded, so add_shards places replicas of the new shards on
// it) stops before AddShards(4) and is killed for good once they are
// placed, before its replicas of them ever started. The new shards have a
// quorum: AddShards answers them serving. Once the broker is declared
// dead its replicas of the new shards are re-created on the live nodes
// like those of serving shards, every shard ends serving with 3 replicas
// on live nodes and a leader, and no message published before or after
// the change is lost or early (checker).
func TestAddShardsBrokerDies(t *testing.T) {
	c, w, ctx := addShardsDeath(t, "grow-death", true)
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	victim := 4
	if info.GetMetaLeaderNodeId() == uint64(victim) {
		victim = 3
	}
	addWithVictim(t, c, victim, 4, true)
	for i := range 20 {
		w.Publish(ctx, "producer", &sundialv1.Message{Topic: "grow-death", Payload: fmt.Appendf(nil, "after-%d", i), DelayMs: int64(500 + 300*i)})
	}
	allReplicated(t, c, victim, 90*time.Second)
	check(t, w)
	framework.WaitFor(t, 60*time.Second, c.ReplicasAgree)
}

// TestAddShardsRF3OnThreeBrokerDies: RF 3 on 3 brokers; one stops before
// AddShards(2) and is killed for good once the new shards are placed. The
// new shards serve on the 2 live replicas (AddShards answers them
// serving); with no live node left to take the dead one's replicas the
// shards run on 2 until a 4th broker joins, which gets the third replica
// of every shard. No message is lost or early (checker).
func TestAddShardsRF3OnThreeBrokerDies(t *testing.T) {
	c, w, ctx := addShardsDeath(t, "grow-rf3", false)
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	victim := 3
	if info.GetMetaLeaderNodeId() == uint64(victim) {
		victim = 2
	}
	added, _ := addWithVictim(t, c, victim, 2, true)
	// Declared dead, the new shards serve on the 2 live replicas.
	framework.WaitFor(t, 60*time.Second, func() error {
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		for _, n := range info.GetNodes() {
			if n.GetNodeId() == uint64(victim) && n.GetState() != sundialv1.NodeState_NODE_STATE_DEAD {
				return fmt.Errorf("node %d is %v", victim, n.GetState())
			}
		}
		for _, s := range info.GetShards() {
			if slices.Contains(added, s.GetShardId()) && (s.GetStarting() || s.GetLeaderNodeId() == 0 || s.GetLeaderNodeId() == uint64(victim)) {
				return fmt.Errorf("new shard %d starting %v, leader %d", s.GetShardId(), s.GetStarting(), s.GetLeaderNodeId())
			}
		}
		return nil
	})
	for i := range 20 {
		w.Publish(ctx, "producer", &sundialv1.Message{Topic: "grow-rf3", Payload: fmt.Appendf(nil, "after-%d", i), DelayMs: int64(500 + 300*i)})
	}
	if _, err := c.Join(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	allReplicated(t, c, victim, 90*time.Second)
	check(t, w)
	framework.WaitFor(t, 60*time.Second, c.ReplicasAgree)
}

// TestAddShardsMetaLeaderDies: as TestAddShardsBrokerDies, but the broker
// killed for good as soon as AddShards(4) placed the shards is the meta
// leader (not stopped before: a proposal a follower forwards to a stopped
// meta leader waits out its deadline, so AddShards would answer
// DeadlineExceeded and need a retry), whose host decides when starting shards serve and
// whose executor registers the topics' groups on them: the next meta
// leader finishes the growth from the meta state (the new shards serve),
// declares the old one dead and repairs its replicas, old and new; no
// message is lost or early.
func TestAddShardsMetaLeaderDies(t *testing.T) {
	c, w, ctx := addShardsDeath(t, "grow-meta", true)
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	victim := int(info.GetMetaLeaderNodeId())
	if victim == 0 {
		t.Fatal("no meta leader")
	}
	addWithVictim(t, c, victim, 4, false)
	for i := range 20 {
		w.Publish(ctx, "producer", &sundialv1.Message{Topic: "grow-meta", Payload: fmt.Appendf(nil, "after-%d", i), DelayMs: int64(500 + 300*i)})
	}
	allReplicated(t, c, victim, 90*time.Second)
	check(t, w)
	framework.WaitFor(t, 60*time.Second, c.ReplicasAgree)
}
