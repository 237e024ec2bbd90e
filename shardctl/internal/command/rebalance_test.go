package command

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// fakeRebalance plans one move; once submitted, each ListOperations moves
// it one step on until it is done.
// With more > 0, a Rebalance after the move is done plans another move
// (the next shard), more times: the planner moves one replica of a shard
// per plan, so a cluster that needs two moves of a shard takes two plans.
type fakeRebalance struct {
	sundialv1.UnimplementedClusterServer
	mu    sync.Mutex
	op    *sundialv1.Operation
	ran   bool
	more  int
	plans int
}

func plannedMove() *sundialv1.Operation {
	return &sundialv1.Operation{Kind: "move-replica", ShardId: 100, FromNodeId: 1, ToNodeId: 4, Reason: "replica-balance",
		Steps: []*sundialv1.OperationStep{{Kind: "add-learner", NodeId: 4}, {Kind: "remove-replica", NodeId: 1}}}
}

func (f *fakeRebalance) Rebalance(_ context.Context, req *sundialv1.RebalanceRequest) (*sundialv1.RebalanceResponse, error) {
	if bad := validate.Rebalance(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.op != nil && f.op.GetStatus() != "done" {
		return &sundialv1.RebalanceResponse{Operations: []*sundialv1.Operation{f.op}, Running: true}, nil
	}
	if f.op != nil && f.plans > f.more {
		return &sundialv1.RebalanceResponse{}, nil
	}
	if req.GetDryRun() {
		return &sundialv1.RebalanceResponse{Operations: []*sundialv1.Operation{plannedMove()}}, nil
	}
	f.plans++
	f.op, f.ran = plannedMove(), false
	f.op.OperationId, f.op.ShardId, f.op.Status = uint64(f.plans), 99+uint64(f.plans), "pending"
	return &sundialv1.RebalanceResponse{Operations: []*sundialv1.Operation{f.op}}, nil
}

func (f *fakeRebalance) ListOperations(context.Context, *sundialv1.ListOperationsRequest) (*sundialv1.ListOperationsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.op == nil {
		return &sundialv1.ListOperationsResponse{}, nil
	}
	if f.ran {
		if f.op.CurrentStep++; int(f.op.CurrentStep) == len(f.op.Steps) {
			f.op.Status, f.op.StartedAtMs, f.op.FinishedAtMs = "done", 1000, 3500
		} else {
			f.op.Status = "running"
		}
	}
	f.ran = true
	return &sundialv1.ListOperationsResponse{Operations: []*sundialv1.Operation{f.op}}, nil
}

func TestRebalanceCommand(t *testing.T) {
	for _, tc := range []cliCase{
		{"dry run", []string{"rebalance", "--dry-run"}, ExitOK, "add-learner 4, remove-replica 1", ""},
		{"dry run says nothing changed", []string{"rebalance", "--dry-run"}, ExitOK, "dry run: 1 operations planned, nothing changed", ""},
		{"dry run json", []string{"rebalance", "--dry-run", "-o", "json"}, ExitOK, `"status": "planned"`, ""},
		{"no wait", []string{"rebalance", "--no-wait"}, ExitOK, "pending", ""},
		{"wait", []string{"rebalance"}, ExitOK, "took 2.5s", "operation 1 (move-replica shard 100) done"},
		{"dry run and no wait", []string{"rebalance", "--dry-run", "--no-wait"}, ExitUsage, "", "submits nothing"},
		{"arguments", []string{"rebalance", "now"}, ExitUsage, "", "takes no arguments"},
		{"too many operations", []string{"rebalance", "--max-operations", "5000"}, ExitFailure, "", "max_operations"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, serveCluster(t, &fakeRebalance{})) })
	}
}

// shardctl rebalance (waiting) plans again once its operations end and
// goes on until a plan is empty: a cluster whose shards each need more
// than one move is balanced when the command returns, not after one plan.
func TestRebalanceWaitsUntilBalanced(t *testing.T) {
	f := &fakeRebalance{more: 2}
	code, out, stderr := run(t, "", "--proxy", serveCluster(t, f), "rebalance")
	if code != ExitOK {
		t.Fatalf("rebalance = %d (stderr %q)", code, stderr)
	}
	for _, want := range []string{"operation 1 (move-replica shard 100) done", "operation 3 (move-replica shard 102) done"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("rebalance stderr = %q, want it to contain %q", stderr, want)
		}
	}
	if !strings.Contains(out, "balanced") {
		t.Errorf("rebalance stdout = %q, want it to end saying the cluster is balanced", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plans != 3 {
		t.Errorf("rebalance submitted %d plans, want 3 (until the planner had nothing left)", f.plans)
	}
}

// A rebalance while one runs reports the running operations; operations
// lists them.
func TestRebalanceWhileRunning(t *testing.T) {
	addr := serveCluster(t, &fakeRebalance{})
	if code, _, stderr := run(t, "", "--proxy", addr, "rebalance", "--no-wait"); code != ExitOK {
		t.Fatalf("first rebalance = %d (%s)", code, stderr)
	}
	code, out, _ := run(t, "", "--proxy", addr, "rebalance", "--no-wait")
	if code != ExitOK || !strings.Contains(out, "already running") {
		t.Fatalf("second rebalance = %d %q, want the running one reported", code, out)
	}
	code, out, _ = run(t, "", "--proxy", addr, "operations")
	if code != ExitOK || !strings.Contains(out, "move-replica") {
		t.Fatalf("operations = %d %q, want the move listed", code, out)
	}
}

// A topic or group operation's steps name their shard, not a node.
func TestViewOperationsNamesAdminStepShards(t *testing.T) {
	v := viewOperations([]*sundialv1.Operation{{
		OperationId: 3, Kind: "create-group", Reason: "topic orders group billing", Status: "running", CurrentStep: 1,
		Topic: "orders", Group: "billing",
		Steps: []*sundialv1.OperationStep{{Kind: "register-group", ShardId: 100}, {Kind: "register-group", ShardId: 101}},
	}})
	if got, want := strings.Join(v[0].Steps, ", "), "register-group shard 100, register-group shard 101"; got != want || v[0].Step != "2/2 register-group" {
		t.Errorf("viewOperations(create-group).Steps = %q, step %q, want %q, step 2/2 register-group", got, v[0].Step, want)
	}
}

// suspectRebalance plans nothing and names node 5 suspect, as the meta
// leader answers while broker 5 misses its probes.
type suspectRebalance struct {
	sundialv1.UnimplementedClusterServer
}

func (suspectRebalance) Rebalance(context.Context, *sundialv1.RebalanceRequest) (*sundialv1.RebalanceResponse, error) {
	return &sundialv1.RebalanceResponse{SuspectNodeIds: []uint64{5}}, nil
}

// A dry run that left a suspect node out says so and does not call the
// cluster balanced (the empty node 5 would get replicas once it answers).
func TestRebalanceDryRunNamesSuspectNodes(t *testing.T) {
	addr := serveCluster(t, suspectRebalance{})
	for _, args := range [][]string{{"rebalance", "--dry-run"}, {"rebalance"}} {
		code, out, stderr := run(t, "", append([]string{"--proxy", addr}, args...)...)
		if code != ExitOK || !strings.Contains(out, "nodes 5 not heard from lately") || strings.Contains(out, "balanced") {
			t.Errorf("Run(%q) = %d, stdout %q, stderr %q; want node 5 named as left out, not balanced", args, code, out, stderr)
		}
	}
	code, out, _ := run(t, "", "--proxy", addr, "rebalance", "--dry-run", "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"suspect_nodes": [`) {
		t.Errorf("rebalance --dry-run -o json = %d, %q; want suspect_nodes", code, out)
	}
}
