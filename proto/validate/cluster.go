package validate

import (
	"fmt"
	"net"
	"strconv"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TransferLeader checks a TransferLeader request's shape: a shard must be
// named (0 is no shard). Whether the shard and the target
// node exist is the broker's to answer (NotFound, FailedPrecondition).
func TransferLeader(req *sundialv1.TransferLeaderRequest) []apierr.FieldViolation {
	if req.GetShardId() == 0 {
		return violation("shard_id", "required: the id of the shard whose leadership moves")
	}
	return nil
}

// JoinCluster checks a JoinCluster request's shape: both addresses as
// host:port with a port, the data dir's incarnation, and well-formed labels
// (Labels). Whether the node
// id is free and the cluster id is this cluster's is meta's to answer
// (AlreadyExists, FailedPrecondition).
func JoinCluster(req *sundialv1.JoinClusterRequest) []apierr.FieldViolation {
	var out []apierr.FieldViolation
	if !dialable(req.GetRaftAddr()) {
		out = append(out, violation("raft_addr", "required: the host:port peers dial for Raft")...)
	}
	if !dialable(req.GetGrpcAddr()) {
		out = append(out, violation("grpc_addr", "required: the host:port proxies and peers reach the broker at")...)
	}
	if req.GetIncarnation() == "" {
		out = append(out, violation("incarnation", "required: the incarnation id of the joining data dir")...)
	}
	if len(req.GetJoinToken()) > MaxJoinTokenBytes {
		out = append(out, violation("join_token", fmt.Sprintf("at most %d bytes: the token shardctl join-token create printed", MaxJoinTokenBytes))...)
	}
	return append(out, Labels("labels", req.GetLabels())...)
}

// MaxJoinTokenBytes caps JoinClusterRequest.join_token.
const MaxJoinTokenBytes = 256

// Bounds of CreateJoinTokenRequest.
const (
	MaxJoinTokenExpiresInMs = 30 * 24 * 3600 * 1000
	MaxJoinTokenUses        = 1000
)

// CreateJoinToken checks that expires_in_ms is in 0..30 days (0 is the
// default, one hour) and uses in 0..MaxJoinTokenUses (0 is one).
func CreateJoinToken(req *sundialv1.CreateJoinTokenRequest) []apierr.FieldViolation {
	var out []apierr.FieldViolation
	if e := req.GetExpiresInMs(); e < 0 || e > MaxJoinTokenExpiresInMs {
		out = append(out, violation("expires_in_ms", fmt.Sprintf("%d is out of range: 0 (one hour) to %d (30 days)", e, int64(MaxJoinTokenExpiresInMs)))...)
	}
	if u := req.GetUses(); u > MaxJoinTokenUses {
		out = append(out, violation("uses", fmt.Sprintf("%d is out of range: 0 (one) to %d", u, MaxJoinTokenUses))...)
	}
	return out
}

// RevokeJoinToken checks that id is set.
func RevokeJoinToken(req *sundialv1.RevokeJoinTokenRequest) []apierr.FieldViolation {
	if req.GetId() == "" {
		return violation("id", "required: the id of the token to revoke (shardctl join-token list shows them)")
	}
	return nil
}

// dialable: host:port with a host and a port from 1 to 65535.
func dialable(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p > 0 && p < 65536
}

// MaxRebalanceOperations caps RebalanceRequest.max_operations.
const MaxRebalanceOperations = 1000

// Rebalance checks a Rebalance request: max_operations is at most
// MaxRebalanceOperations (0 is the planner's default).
func Rebalance(req *sundialv1.RebalanceRequest) []apierr.FieldViolation {
	if req.GetMaxOperations() > MaxRebalanceOperations {
		return violation("max_operations", "at most 1000 operations a plan (0: the default, 16)")
	}
	return nil
}

// DrainNode checks a DrainNode request: node_id is required.
func DrainNode(req *sundialv1.DrainNodeRequest) []apierr.FieldViolation {
	if req.GetNodeId() == 0 {
		return violation("node_id", "required: the id of the node to drain")
	}
	return nil
}

// RemoveNode checks a RemoveNode request: node_id is required.
func RemoveNode(req *sundialv1.RemoveNodeRequest) []apierr.FieldViolation {
	if req.GetNodeId() == 0 {
		return violation("node_id", "required: the id of the node to remove")
	}
	return nil
}

// CancelOperation checks that the request names an operation.
func CancelOperation(req *sundialv1.CancelOperationRequest) []apierr.FieldViolation {
	if req.GetOperationId() == 0 {
		return violation("operation_id", "required: the id of the operation to cancel (shardctl operations list shows them)")
	}
	return nil
}

// MaxAddShards caps AddShardsRequest.count (the meta group refuses more
// too).
const MaxAddShards = 256

// AddShards checks that count is in 1..MaxAddShards.
func AddShards(req *sundialv1.AddShardsRequest) []apierr.FieldViolation {
	if n := req.GetCount(); n < 1 || n > MaxAddShards {
		return violation("count", "shards to add: 1..256")
	}
	return nil
}
