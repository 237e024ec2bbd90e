package integration

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// zonesOf maps each shard to the zones of its replicas' nodes.
func zonesOf(info *sundialv1.ClusterInfo) map[uint64][]string {
	zone := map[uint64]string{}
	for _, n := range info.GetNodes() {
		zone[n.GetNodeId()] = n.GetLabels()["zone"]
	}
	out := map[uint64][]string{}
	for _, s := range info.GetShards() {
		for _, r := range s.GetReplicas() {
			out[s.GetShardId()] = append(out[s.GetShardId()], zone[r.GetNodeId()])
		}
	}
	return out
}

func distinct(zones []string) int {
	seen := map[string]bool{}
	for _, z := range zones {
		seen[z] = true
	}
	return len(seen)
}

// rebalanceOnce runs one rebalance through cl and waits until its
// operations are done. One round is what these tests need: its moves all
// start from nodes 1-3, which hold every shard, the meta leader included
// (the executor changes a shard's membership through the meta leader's own
// replica for now; docs/operations.md, limits).
func rebalanceOnce(t *testing.T, cl sundialv1.ClusterClient) {
	t.Helper()
	var plan *sundialv1.RebalanceResponse
	Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		plan, err = cl.Rebalance(ctx, &sundialv1.RebalanceRequest{})
		return err
	})
	if len(plan.GetOperations()) == 0 {
		t.Fatal("Rebalance() planned nothing, want zone-spread moves")
	}
	for id, op := range waitEnded(t, cl, 3*time.Minute) {
		if op.GetStatus() != "done" {
			t.Fatalf("rebalance operation %d = %v, want done", id, op)
		}
	}
}

// zonedCluster is 3 brokers with zone labels (1 and 2 in zone a, 3 in zone
// b; rack rN each), 2 shards of 3 replicas, and a 4th broker joined in zone
// c; it checks that GetClusterInfo shows every node's labels. A
// snapshotEntries above 0 makes every replica snapshot that often.
func zonedCluster(t *testing.T, snapshotEntries uint64) *Cluster {
	t.Helper()
	zones := map[uint64]string{1: "a", 2: "a", 3: "b"}
	c := New(t, Config{Shards: 2, Tune: func(bc *broker.Config) {
		bc.Labels = map[string]string{"zone": zones[bc.NodeID], "rack": "r" + strconv.FormatUint(bc.NodeID, 10)}
		bc.Operations.StepTimeout = 20 * time.Second
		bc.Operations.CatchUpTimeout = 60 * time.Second
		if snapshotEntries > 0 {
			bc.SnapshotEntries, bc.RaftLogKeepEntries = snapshotEntries, snapshotEntries/2
		}
	}})
	for _, zs := range zonesOf(clusterInfo(t, c)) {
		if distinct(zs) != 2 {
			t.Fatalf("before the join, shard zones = %v, want every shard in zones a and b", zs)
		}
	}
	cfg := joinConfig(t, c, 0, seedsFollowerFirst(t, c)...)
	cfg.Labels = map[string]string{"zone": "c"}
	c.Nodes = append(c.Nodes, &Node{Config: cfg})
	c.StartBroker(3)
	Eventually(t, 30*time.Second, func() error {
		info := clusterInfo(t, c)
		for _, n := range info.GetNodes() {
			want := map[string]string{"zone": zones[n.GetNodeId()], "rack": "r" + strconv.FormatUint(n.GetNodeId(), 10)}
			if n.GetNodeId() == 4 {
				want = map[string]string{"zone": "c"}
			}
			if !maps.Equal(n.GetLabels(), want) {
				return fmt.Errorf("node %d labels = %v, want %v", n.GetNodeId(), n.GetLabels(), want)
			}
		}
		if len(info.GetNodes()) != 4 {
			return fmt.Errorf("%d nodes, want 4", len(info.GetNodes()))
		}
		return nil
	})
	return c
}

// Brokers carry zone labels (--labels; the 4th joins with its own): a
// rebalance through the proxy spreads every shard, first on nodes 1-3 (two
// replicas in zone a), over the 3 zones a, b and c, and every broker's
// sundial_broker_replicas / sundial_broker_leaders match the placement.
func TestZoneLabelsSpreadReplicas(t *testing.T) {
	c := zonedCluster(t, 0)
	rebalanceOnce(t, clusterClient(t, c.Proxy.GRPCAddr()))
	info := clusterInfo(t, c)
	for shard, zs := range zonesOf(info) {
		if len(zs) != 3 || distinct(zs) != 3 {
			t.Errorf("after the rebalance shard %d has replicas in zones %v, want a, b and c", shard, zs)
		}
	}
	// Each broker serves its own replica and leader counts.
	replicas := map[uint64]float64{}
	for _, s := range info.GetShards() {
		for _, r := range s.GetReplicas() {
			replicas[r.GetNodeId()]++
		}
	}
	Eventually(t, 20*time.Second, func() error {
		leaders := 0.0
		for i, n := range c.Nodes {
			id := uint64(i + 1)
			if got := gauge(t, n.Metrics, "sundial_broker_replicas"); got != replicas[id] {
				return fmt.Errorf("broker %d serves sundial_broker_replicas %v, want %v", id, got, replicas[id])
			}
			leaders += gauge(t, n.Metrics, "sundial_broker_leaders")
		}
		if leaders != 2 {
			return fmt.Errorf("sundial_broker_leaders sums to %v over the brokers, want 2 (one per shard)", leaders)
		}
		return nil
	})
}

// A joined broker that received replicas through a rebalance (added as
// learners, then promoted), restarted on its data dir, keeps its node id,
// does not join again, and leads each shard whose replica it holds with
// the messages published before its restart.
func TestJoinedBrokerRestartKeepsItsReplicasData(t *testing.T) {
	c := zonedCluster(t, 10)
	rebalanceOnce(t, clusterClient(t, c.Proxy.GRPCAddr()))
	info := clusterInfo(t, c)

	// The joined broker now holds a replica of every shard.
	const topic = "zones"
	want := map[string]bool{}
	dueAt := time.Now().Add(2 * time.Second).UnixMilli()
	for i := range 60 {
		r := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(strconv.Itoa(i)), DeliverAtUnixMs: dueAt})
		want[r[0].MessageId] = true
	}
	// With a snapshot every 10 entries the joined broker's replicas hold
	// snapshots, so the restart recovers each from a snapshot and replays
	// the log after it (which of the two carries its promotion depends on
	// timing; either must bring it back as a voter).
	Eventually(t, 30*time.Second, func() error {
		var snaps []string
		err := filepath.WalkDir(filepath.Join(c.Nodes[3].Config.DataDir, "raft"), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "snapshot-") && strings.Count(d.Name(), "-") == 1 {
				snaps = append(snaps, path)
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(snaps) < 2 {
			return fmt.Errorf("joined broker's snapshots %v, want one per shard", snaps)
		}
		return nil
	})
	c.StopBroker(3)
	c.StartBroker(3)
	if got := c.Nodes[3].Server.NodeID(); got != 4 {
		t.Fatalf("restarted joined broker's NodeID() = %d, want 4", got)
	}
	for _, s := range info.GetShards() {
		Eventually(t, 60*time.Second, func() error {
			leader := c.LeaderOf(s.GetShardId())
			if leader == 3 {
				return nil
			}
			if err := c.Nodes[leader].Server.TransferLeadership(t.Context(), s.GetShardId(), 4); err != nil {
				return err
			}
			return fmt.Errorf("shard %d led by node %d, want 4", s.GetShardId(), leader+1)
		})
	}
	if n := len(clusterInfo(t, c).GetNodes()); n != 4 {
		t.Fatalf("%d nodes after the restart, want 4: the broker joined again", n)
	}
	c.WaitReady()
	sub := c.Subscribe(topic, "", 100, 0)
	defer sub.Close()
	deadline := time.Now().Add(60 * time.Second)
	for len(want) > 0 {
		got, ok := sub.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("%d messages published before the restart never delivered by node 4 (stream error %v)", len(want), sub.Err())
		}
		delete(want, got.MessageId)
		ack(t, c, got.Receipt)
		sub.Credit(1)
	}
}
