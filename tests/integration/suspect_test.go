package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Finding B of docs/reliability.md: a drain planned its moves onto a broker
// that had stopped but was not declared dead yet, and each rolled back at
// the catch-up timeout. Here a 4th broker joins and stops; once the meta
// leader names it suspect, a drain of a broker that is not the meta leader
// plans no move onto it (every other node holds every shard, so the only
// target left is the stopped one: the replicas stay, only leaderships
// move), and the drained node keeps its replicas.
func TestDrainSkipsStoppedBroker(t *testing.T) {
	c := newSuspectCluster(t)
	cfg := joinConfig(t, c, 0, seedsFollowerFirst(t, c)...)
	c.Nodes = append(c.Nodes, &Node{Config: cfg})
	c.StartBroker(3)
	if n := len(clusterInfo(t, c).GetNodes()); n != 4 {
		t.Fatalf("%d nodes after the join, want 4", n)
	}
	c.StopBroker(3)
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	Eventually(t, 60*time.Second, func() error {
		ctx, cancel := callCtx()
		defer cancel()
		plan, err := cl.Rebalance(ctx, &sundialv1.RebalanceRequest{DryRun: true})
		if err != nil {
			return err
		}
		if !slices.Equal(plan.GetSuspectNodeIds(), []uint64{4}) {
			return fmt.Errorf("suspect nodes %v, want [4]", plan.GetSuspectNodeIds())
		}
		return nil
	})
	victim := clusterInfo(t, c).GetMetaLeaderNodeId()%3 + 1
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := cl.DrainNode(ctx, &sundialv1.DrainNodeRequest{NodeId: victim})
	if err != nil {
		t.Fatalf("DrainNode(%d) error = %v", victim, err)
	}
	for _, op := range resp.GetOperations() {
		if op.GetToNodeId() == 4 || op.GetKind() != "transfer-leader" {
			t.Fatalf("DrainNode(%d) planned %v; want only leadership transfers, nothing onto the stopped node 4", victim, op)
		}
	}
	if resp.GetRemainingReplicas() != 2 {
		t.Fatalf("DrainNode(%d) = %v, want its 2 replicas kept", victim, resp)
	}
}

// newSuspectCluster is 3 brokers on 2 shards whose meta leader names a
// node suspect 2 s after its last answer (dead_node_timeout stays 5 min).
func newSuspectCluster(t *testing.T) *Cluster {
	t.Helper()
	return New(t, Config{Shards: 2, Tune: func(bc *broker.Config) { bc.SuspectNodeTimeout = 2 * time.Second }})
}
