package validate

import (
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// ChangeShardMembership checks a Peer.ChangeShardMembership request's
// shape: a shard, a known change, a replica id, and for an add the Raft
// address of the replica's node.
func ChangeShardMembership(req *brokerv1.ChangeShardMembershipRequest) []apierr.FieldViolation {
	var out []apierr.FieldViolation
	if req.GetShardId() == 0 {
		out = append(out, violation("shard_id", "required: the id of the shard whose membership changes")...)
	}
	switch req.GetChange() {
	case brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_NON_VOTING, brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_VOTER:
		if !dialable(req.GetRaftAddr()) {
			out = append(out, violation("raft_addr", "required to add a replica: the host:port of its node's Raft transport")...)
		}
	case brokerv1.MembershipChange_MEMBERSHIP_CHANGE_DELETE:
	default:
		out = append(out, violation("change", "required: add-non-voting, add-voter or delete")...)
	}
	if req.GetReplicaId() == 0 {
		out = append(out, violation("replica_id", "required: the replica the change adds, promotes or deletes")...)
	}
	return out
}

// TransferShardLeader checks a Peer.TransferShardLeader request's shape.
func TransferShardLeader(req *brokerv1.TransferShardLeaderRequest) []apierr.FieldViolation {
	var out []apierr.FieldViolation
	if req.GetShardId() == 0 {
		out = append(out, violation("shard_id", "required: the id of the shard whose leadership moves")...)
	}
	if req.GetToNodeId() == 0 {
		out = append(out, violation("to_node_id", "required: the node whose replica is to lead")...)
	}
	return out
}
