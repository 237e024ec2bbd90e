package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// A cluster of 3 brokers whose shards sit on nodes 1-3 gets a 4th node
// registered in the meta state (no broker runs it). Through the proxy: a
// dry run plans moves onto node 4 and changes nothing; a rebalance submits
// them (operations with ids and new replica ids, pending); a rebalance
// while they are unfinished answers the same operations as running;
// ListOperations lists them; bad input is InvalidArgument naming the field.
// Node 4 never answers the meta leader's probes, so the suspect timeout is
// raised past the test: else the planner leaves it alone after 3 s
// (TestRebalanceSkipsSuspectNode).
func TestRebalanceRPC(t *testing.T) {
	c := New(t, Config{Shards: 4, Tune: func(bc *broker.Config) { bc.SuspectNodeTimeout = time.Hour }})
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	if _, err := cl.Rebalance(ctx(), &sundialv1.RebalanceRequest{DryRun: true, MaxOperations: 5000}); status.Code(err) != codes.InvalidArgument ||
		len(apierr.Violations(err)) != 1 || apierr.Violations(err)[0].Field != "max_operations" {
		t.Fatalf("Rebalance(max 5000) error = %v, want InvalidArgument on max_operations", err)
	}

	four := &meta.Node{ID: 4, RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
	Eventually(t, 20*time.Second, func() error {
		_, _, err := c.Nodes[0].Server.ProposeMeta(ctx(), &meta.Command{Op: meta.OpRegisterNode, Node: four})
		return err
	})

	var plan *sundialv1.RebalanceResponse
	Eventually(t, 20*time.Second, func() error {
		var err error
		plan, err = cl.Rebalance(ctx(), &sundialv1.RebalanceRequest{DryRun: true})
		return err
	})
	// 12 replicas on 4 nodes: 3 move to node 4.
	if len(plan.GetOperations()) != 3 || plan.GetRunning() {
		t.Fatalf("dry run = %v, want 3 moves", plan)
	}
	for _, op := range plan.GetOperations() {
		if op.GetKind() != string(meta.OpKindMoveReplica) || op.GetToNodeId() != 4 || op.GetOperationId() != 0 {
			t.Fatalf("planned %v, want an unsubmitted move to node 4", op)
		}
	}
	if ops, err := cl.ListOperations(ctx(), &sundialv1.ListOperationsRequest{}); err != nil || len(ops.GetOperations()) != 0 {
		t.Fatalf("ListOperations after a dry run = %v, %v; want none", ops, err)
	}

	sub, err := cl.Rebalance(ctx(), &sundialv1.RebalanceRequest{MaxOperations: 1})
	if err != nil || len(sub.GetOperations()) != 1 || sub.GetRunning() {
		t.Fatalf("Rebalance(max 1) = %v, %v; want one submitted operation", sub, err)
	}
	op := sub.GetOperations()[0]
	if op.GetOperationId() == 0 || op.GetNewReplicaId() == 0 || op.GetToNodeId() != 4 {
		t.Fatalf("submitted %v, want an id, a new replica id and node 4", op)
	}
	again, err := cl.Rebalance(ctx(), &sundialv1.RebalanceRequest{DryRun: true})
	if err != nil || !again.GetRunning() || len(again.GetOperations()) != 1 || again.GetOperations()[0].GetOperationId() != op.GetOperationId() {
		t.Fatalf("Rebalance while one runs = %v, %v; want operation %d reported running", again, err, op.GetOperationId())
	}
	ops, err := cl.ListOperations(ctx(), &sundialv1.ListOperationsRequest{UnfinishedOnly: true})
	if err != nil || len(ops.GetOperations()) != 1 || ops.GetOperations()[0].GetOperationId() != op.GetOperationId() {
		t.Fatalf("ListOperations = %v, %v; want operation %d", ops, err, op.GetOperationId())
	}
}

// Finding B of docs/reliability.md: a 4th node registered in the meta state
// that no broker runs (as a broker that went down before it was declared
// dead) is a target only until the meta leader has missed its answers for
// suspect_node_timeout. Through the proxy (which may ask any broker: the
// plan is made on the meta leader), the dry run soon plans nothing onto it
// (before the fix: 3 moves onto node 4, forever) and names node 4 as left
// out, and neither does the rebalance it previews.
func TestRebalanceSkipsSuspectNode(t *testing.T) {
	c := New(t, Config{Shards: 4, Tune: func(bc *broker.Config) { bc.SuspectNodeTimeout = 2 * time.Second }})
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	four := &meta.Node{ID: 4, RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
	Eventually(t, 20*time.Second, func() error {
		_, _, err := c.Nodes[0].Server.ProposeMeta(ctx(), &meta.Command{Op: meta.OpRegisterNode, Node: four})
		return err
	})
	Eventually(t, 60*time.Second, func() error {
		plan, err := cl.Rebalance(ctx(), &sundialv1.RebalanceRequest{DryRun: true})
		if err != nil {
			return err
		}
		for _, op := range plan.GetOperations() {
			if op.GetToNodeId() == 4 {
				return fmt.Errorf("dry run still plans %v onto node 4", op)
			}
		}
		if !slices.Equal(plan.GetSuspectNodeIds(), []uint64{4}) {
			return fmt.Errorf("dry run names suspect nodes %v, want [4]", plan.GetSuspectNodeIds())
		}
		return nil
	})
	sub, err := cl.Rebalance(ctx(), &sundialv1.RebalanceRequest{})
	if err != nil {
		t.Fatalf("Rebalance() error = %v", err)
	}
	for _, op := range sub.GetOperations() {
		if op.GetToNodeId() == 4 || op.GetFromNodeId() == 4 {
			t.Fatalf("Rebalance() submitted %v with node 4 suspect", op)
		}
	}
}
