package validate

import (
	"slices"
	"testing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

func TestChangeShardMembership(t *testing.T) {
	const (
		add = brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_NON_VOTING
		del = brokerv1.MembershipChange_MEMBERSHIP_CHANGE_DELETE
	)
	for _, tc := range []struct {
		name   string
		req    *brokerv1.ChangeShardMembershipRequest
		fields []string // none when valid
	}{
		{"add", &brokerv1.ChangeShardMembershipRequest{ShardId: 100, Change: add, ReplicaId: 7, RaftAddr: "127.0.0.1:7604"}, nil},
		{"delete needs no address", &brokerv1.ChangeShardMembershipRequest{ShardId: 100, Change: del, ReplicaId: 7}, nil},
		{"add without address", &brokerv1.ChangeShardMembershipRequest{ShardId: 100, Change: add, ReplicaId: 7}, []string{"raft_addr"}},
		{"add to a bad address", &brokerv1.ChangeShardMembershipRequest{ShardId: 100, Change: add, ReplicaId: 7, RaftAddr: "127.0.0.1"}, []string{"raft_addr"}},
		{"no change", &brokerv1.ChangeShardMembershipRequest{ShardId: 100, ReplicaId: 7}, []string{"change"}},
		{"unknown change", &brokerv1.ChangeShardMembershipRequest{ShardId: 100, Change: 42, ReplicaId: 7}, []string{"change"}},
		{"empty", &brokerv1.ChangeShardMembershipRequest{}, []string{"shard_id", "change", "replica_id"}},
		{"nil", nil, []string{"shard_id", "change", "replica_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, v := range ChangeShardMembership(tc.req) {
				got = append(got, v.Field)
			}
			if !slices.Equal(got, tc.fields) {
				t.Errorf("ChangeShardMembership(%v) fields = %v, want %v", tc.req, got, tc.fields)
			}
		})
	}
}

func TestTransferShardLeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		req    *brokerv1.TransferShardLeaderRequest
		fields []string
	}{
		{"valid", &brokerv1.TransferShardLeaderRequest{ShardId: 100, ToNodeId: 2}, nil},
		{"no node", &brokerv1.TransferShardLeaderRequest{ShardId: 100}, []string{"to_node_id"}},
		{"empty", &brokerv1.TransferShardLeaderRequest{}, []string{"shard_id", "to_node_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, v := range TransferShardLeader(tc.req) {
				got = append(got, v.Field)
			}
			if !slices.Equal(got, tc.fields) {
				t.Errorf("TransferShardLeader(%v) fields = %v, want %v", tc.req, got, tc.fields)
			}
		})
	}
}
