package validate

import (
	"testing"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestTransferLeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   *sundialv1.TransferLeaderRequest
		field string // "" when valid
	}{
		{"no shard", &sundialv1.TransferLeaderRequest{ToNodeId: 2}, "shard_id"},
		{"any node", &sundialv1.TransferLeaderRequest{ShardId: 100}, ""},
		{"named node", &sundialv1.TransferLeaderRequest{ShardId: 100, ToNodeId: 3}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TransferLeader(tc.req)
			switch {
			case tc.field == "" && len(got) != 0:
				t.Errorf("TransferLeader(%v) = %v, want none", tc.req, got)
			case tc.field != "" && (len(got) != 1 || got[0].Field != tc.field):
				t.Errorf("TransferLeader(%v) = %v, want one on %s", tc.req, got, tc.field)
			}
		})
	}
}

func TestJoinCluster(t *testing.T) {
	ok := func() *sundialv1.JoinClusterRequest {
		return &sundialv1.JoinClusterRequest{RaftAddr: "127.0.0.1:7604", GrpcAddr: "127.0.0.1:7504", Incarnation: "ab"}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*sundialv1.JoinClusterRequest)
		field string // "" when valid
	}{
		{"valid", func(*sundialv1.JoinClusterRequest) {}, ""},
		{"no raft address", func(r *sundialv1.JoinClusterRequest) { r.RaftAddr = "" }, "raft_addr"},
		{"raft address without port", func(r *sundialv1.JoinClusterRequest) { r.RaftAddr = "127.0.0.1" }, "raft_addr"},
		{"grpc port 0", func(r *sundialv1.JoinClusterRequest) { r.GrpcAddr = "127.0.0.1:0" }, "grpc_addr"},
		{"no incarnation", func(r *sundialv1.JoinClusterRequest) { r.Incarnation = "" }, "incarnation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ok()
			tc.edit(req)
			got := JoinCluster(req)
			switch {
			case tc.field == "" && len(got) != 0:
				t.Errorf("JoinCluster(%v) = %v, want none", req, got)
			case tc.field != "" && (len(got) != 1 || got[0].Field != tc.field):
				t.Errorf("JoinCluster(%v) = %v, want one on %s", req, got, tc.field)
			}
		})
	}
}

func TestRebalance(t *testing.T) {
	if got := Rebalance(&sundialv1.RebalanceRequest{MaxOperations: 1001}); len(got) != 1 || got[0].Field != "max_operations" {
		t.Errorf("Rebalance(1001 operations) = %v, want one on max_operations", got)
	}
	if got := Rebalance(&sundialv1.RebalanceRequest{DryRun: true, MaxOperations: 1000}); len(got) != 0 {
		t.Errorf("Rebalance(1000 operations) = %v, want none", got)
	}
}

func TestDrainAndRemoveNode(t *testing.T) {
	if got := DrainNode(&sundialv1.DrainNodeRequest{}); len(got) != 1 || got[0].Field != "node_id" {
		t.Errorf("DrainNode(node_id 0) = %v, want one on node_id", got)
	}
	if got := DrainNode(&sundialv1.DrainNodeRequest{NodeId: 4}); len(got) != 0 {
		t.Errorf("DrainNode(node_id 4) = %v, want none", got)
	}
	if got := RemoveNode(&sundialv1.RemoveNodeRequest{Force: true}); len(got) != 1 || got[0].Field != "node_id" {
		t.Errorf("RemoveNode(node_id 0) = %v, want one on node_id", got)
	}
	if got := RemoveNode(&sundialv1.RemoveNodeRequest{NodeId: 4}); len(got) != 0 {
		t.Errorf("RemoveNode(node_id 4) = %v, want none", got)
	}
}

func TestCancelOperation(t *testing.T) {
	if got := CancelOperation(&sundialv1.CancelOperationRequest{}); len(got) != 1 || got[0].Field != "operation_id" {
		t.Errorf("CancelOperation(operation_id 0) = %v, want one on operation_id", got)
	}
	if got := CancelOperation(&sundialv1.CancelOperationRequest{OperationId: 7}); len(got) != 0 {
		t.Errorf("CancelOperation(operation_id 7) = %v, want none", got)
	}
}

func TestAddShards(t *testing.T) {
	for _, n := range []int32{-1, 0, 257} {
		if got := AddShards(&sundialv1.AddShardsRequest{Count: n}); len(got) != 1 || got[0].Field != "count" {
			t.Errorf("AddShards(%d) = %v, want one on count", n, got)
		}
	}
	for _, n := range []int32{1, 256} {
		if got := AddShards(&sundialv1.AddShardsRequest{Count: n}); len(got) != 0 {
			t.Errorf("AddShards(%d) = %v, want none", n, got)
		}
	}
}
