package command

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// fakeNodes knows nodes 1-4. Draining node 4 takes three DrainNode calls:
// 2 replicas and 1 leadership, then 1 replica, then nothing. Node 4 can be
// removed once drained; node 3 answers, so --force is refused for it.
type fakeNodes struct {
	sundialv1.UnimplementedClusterServer
	lock   sync.Mutex
	drains int
}

func (f *fakeNodes) node(id uint64) (*sundialv1.Node, error) {
	if id > 4 {
		return nil, status.Errorf(codes.NotFound, "node %d is not a member of the cluster", id)
	}
	return &sundialv1.Node{NodeId: id, State: sundialv1.NodeState_NODE_STATE_DRAINING}, nil
}

func (f *fakeNodes) DrainNode(_ context.Context, req *sundialv1.DrainNodeRequest) (*sundialv1.DrainNodeResponse, error) {
	if bad := validate.DrainNode(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	n, err := f.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	f.lock.Lock()
	defer f.lock.Unlock()
	f.drains++
	switch f.drains {
	case 1:
		return &sundialv1.DrainNodeResponse{Node: n, RemainingReplicas: 2, RemainingLeaders: 1, PendingOperations: 2, Operations: []*sundialv1.Operation{
			{OperationId: 7, Kind: "move-replica", ShardId: 101, FromNodeId: 4, ToNodeId: 1, Status: "pending"},
			{OperationId: 8, Kind: "move-replica", ShardId: 104, FromNodeId: 4, ToNodeId: 2, Status: "pending"},
		}}, nil
	case 2:
		return &sundialv1.DrainNodeResponse{Node: n, RemainingReplicas: 1, PendingOperations: 1}, nil
	}
	return &sundialv1.DrainNodeResponse{Node: n}, nil
}

func (f *fakeNodes) ListOperations(context.Context, *sundialv1.ListOperationsRequest) (*sundialv1.ListOperationsResponse, error) {
	return &sundialv1.ListOperationsResponse{Operations: []*sundialv1.Operation{
		{OperationId: 7, Kind: "move-replica", ShardId: 101, FromNodeId: 4, ToNodeId: 1, Status: "done", StartedAtMs: 1000, FinishedAtMs: 3000},
		{OperationId: 8, Kind: "move-replica", ShardId: 104, FromNodeId: 4, ToNodeId: 2, Status: "done", StartedAtMs: 1000, FinishedAtMs: 4000},
	}}, nil
}

func (f *fakeNodes) RemoveNode(_ context.Context, req *sundialv1.RemoveNodeRequest) (*sundialv1.RemoveNodeResponse, error) {
	if bad := validate.RemoveNode(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if _, err := f.node(req.GetNodeId()); err != nil {
		return nil, err
	}
	id := req.GetNodeId()
	switch {
	case req.GetForce():
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "force", Description: fmt.Sprintf(
			"node %d at 127.0.0.1:750%d answers: --force is only for a dead or unreachable node; run shardctl drain-node %d, then shardctl remove-node %d", id, id, id, id)})
	case id != 4:
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id", Description: fmt.Sprintf(
			"node %d still holds 3 replicas (shards 101, 104, 107): run shardctl drain-node %d first", id, id)})
	}
	return &sundialv1.RemoveNodeResponse{Node: &sundialv1.Node{NodeId: 4, State: sundialv1.NodeState_NODE_STATE_REMOVED}, LeftMetaGroup: true, PromotedMetaVoter: 5}, nil
}

func TestNodeCommands(t *testing.T) {
	for _, tc := range []cliCase{
		{"drain and wait", []string{"drain-node", "4"}, ExitOK, "node 4 drained: it holds no replicas and leads no shard; remove it with shardctl remove-node 4",
			"node 4: 2 replicas, 1 leadership left, 2 operations pending\nnode 4: 1 replica, 0 leaderships left, 1 operation pending\n"},
		{"drain lists its moves", []string{"drain-node", "4"}, ExitOK, "took 3s", ""},
		{"drain no wait", []string{"drain-node", "--no-wait", "4"}, ExitOK, "node 4 draining: 2 replicas, 1 leadership left, 2 operations pending", ""},
		{"drain json", []string{"drain-node", "-o", "json", "4"}, ExitOK, `"drained": true`, ""},
		{"drain unknown node", []string{"drain-node", "9"}, ExitFailure, "", "shardctl: drain-node 9: node 9 is not a member of the cluster (see shardctl status)"},
		{"drain without id", []string{"drain-node"}, ExitUsage, "", "drain-node takes one argument, the node ID"},
		{"drain id 0", []string{"drain-node", "0"}, ExitUsage, "", `drain-node "0": want a node id`},
		{"remove drained", []string{"remove-node", "4"}, ExitOK, "left", ""},
		{"remove not drained", []string{"remove-node", "3"}, ExitFailure, "",
			"shardctl: remove-node 3: node 3 still holds 3 replicas (shards 101, 104, 107): run shardctl drain-node 3 first\n"},
		{"remove live with force", []string{"remove-node", "--force", "3"}, ExitFailure, "", "--force is only for a dead or unreachable node"},
		{"remove unknown", []string{"remove-node", "12"}, ExitFailure, "", "node 12 is not a member of the cluster"},
		{"remove not a number", []string{"remove-node", "four"}, ExitUsage, "", `remove-node "four": want a node id`},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, serveCluster(t, &fakeNodes{})) })
	}
}

func TestRenderDrainAndRemove(t *testing.T) {
	drain := drainView{NodeID: 4, State: "draining", RemainingReplicas: 1, PendingOperations: 1, Operations: []operationView{
		{ID: 7, Kind: "move-replica", Shard: 101, From: 4, To: 1, Status: "done", Duration: "2s"},
		{ID: 8, Kind: "move-replica", Shard: 104, From: 4, To: 2, Status: "running", Step: "2/6 wait-catch-up"},
	}}
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderDrain(&b, format, drain); err != nil {
				t.Fatalf("renderDrain(%s) = %v, want nil", format, err)
			}
			if err := renderRemove(&b, format, removeView{NodeID: 4, State: "removed", LeftMetaGroup: true, PromotedMetaVoter: 5}); err != nil {
				t.Fatalf("renderRemove(%s) = %v, want nil", format, err)
			}
			golden(t, "nodes."+format, b.String())
		})
	}
}
