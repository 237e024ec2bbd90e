package command

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestRenderTransfer(t *testing.T) {
	elected := true
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderTransfer(&b, format, transferView{ShardID: 100, FromNodeID: 1, ToNodeID: 2, Elected: &elected}); err != nil {
				t.Fatalf("renderTransfer(%s) = %v, want nil", format, err)
			}
			golden(t, "transfer."+format, b.String())
		})
	}
}

// fakeCluster leads shard 100 from node 1 with replicas on nodes 1-3; a
// transfer takes effect on the second request (the first is "dropped", as
// Dragonboat drops one to a lagging replica).
type fakeCluster struct {
	sundialv1.UnimplementedClusterServer
	mu     sync.Mutex
	leader uint64
	asked  int
}

func (f *fakeCluster) TransferLeader(_ context.Context, req *sundialv1.TransferLeaderRequest) (*sundialv1.TransferLeaderResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetShardId() != 100 {
		return nil, status.Errorf(codes.NotFound, "shard %d not found", req.GetShardId())
	}
	to := req.GetToNodeId()
	if to == 0 {
		to = f.leader%3 + 1
	}
	if to > 3 {
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "to_node_id", Description: "node 9 holds no replica of shard 100"})
	}
	resp := &sundialv1.TransferLeaderResponse{ShardId: 100, FromNodeId: f.leader, ToNodeId: to}
	if f.asked++; f.asked >= 2 {
		f.leader = to
	}
	return resp, nil
}

func (f *fakeCluster) ListShards(context.Context, *sundialv1.ListShardsRequest) (*sundialv1.ListShardsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &sundialv1.ListShardsResponse{Shards: []*sundialv1.Shard{{ShardId: 100, LeaderNodeId: f.leader}}}, nil
}

func TestTransferLeaderCommand(t *testing.T) {
	for _, tc := range []cliCase{
		{"no shard", []string{"transfer-leader"}, ExitUsage, "", "--shard is required"},
		{"arguments", []string{"transfer-leader", "--shard", "100", "2"}, ExitUsage, "", "takes no arguments"},
		{"bad shard", []string{"transfer-leader", "--shard", "x"}, ExitUsage, "", "invalid value"},
		{"requested", []string{"transfer-leader", "--shard", "100", "--to", "2"}, ExitOK, "requested", ""},
		{"any node json", []string{"transfer-leader", "--shard", "100", "-o", "json"}, ExitOK, `"to_node_id": 2`, ""},
		{"wait", []string{"transfer-leader", "--shard", "100", "--to", "3", "--wait"}, ExitOK, "elected", ""},
		{"unknown shard", []string{"transfer-leader", "--shard", "7"}, ExitFailure, "", "shard 7 not found"},
		{"node without replica", []string{"transfer-leader", "--shard", "100", "--to", "9"}, ExitFailure, "", "to_node_id: node 9 holds no replica"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, serveCluster(t, &fakeCluster{leader: 1})) })
	}
}
