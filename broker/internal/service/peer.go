package service

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/backup"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Peer serves brokerv1.Peer: what this broker knows about the cluster, for
// brokers that start (see package identity); the membership and
// leadership changes of the shards it hosts, for the executor on the meta
// leader when that holds no replica of a shard (package operator); and the
// captures, journal trims and restore steps of the shards it leads, for
// backups and restores (backuppeer.go).
type Peer struct {
	brokerv1.UnimplementedPeerServer
	meta     *host.MetaClient
	replicas *host.Replicas
	moves    *host.Moves
	node     uint64
	// capturer writes the shard captures of backups (backuppeer.go).
	capturer *backup.Capturer
}

// NewPeer returns the Peer service of node.
func NewPeer(h *host.Host, node uint64, capturer *backup.Capturer) *Peer {
	return &Peer{meta: h.MetaClient(), replicas: h.Replicas(), moves: h.Moves(), node: node, capturer: capturer}
}

// Identify answers from the meta state this broker applied, without a
// quorum read: it must answer while the meta group has no leader.
func (p *Peer) Identify(context.Context, *brokerv1.IdentifyRequest) (*brokerv1.IdentifyResponse, error) {
	st := p.meta.Meta()
	resp := &brokerv1.IdentifyResponse{NodeId: p.node, ClusterId: st.ClusterID, ShardLeaders: p.replicas.LocalShardLeaders()}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		resp.Nodes = append(resp.Nodes, &brokerv1.KnownNode{NodeId: uint64(n.ID), Incarnation: n.Incarnation, State: string(n.State), Starts: n.Starts})
	}
	return resp, nil
}

// AddToCluster refuses: this broker is a member already (a waiting
// broker serves AddToCluster from the broker package until it is added).
func (p *Peer) AddToCluster(context.Context, *brokerv1.AddToClusterRequest) (*brokerv1.AddToClusterResponse, error) {
	return nil, status.Errorf(codes.FailedPrecondition, "broker is node %d of cluster %s already", p.node, p.meta.Meta().ClusterID)
}

// ChangeShardMembership runs one membership change of a hosted shard
// through its local replica, with the host's idempotent functions (a
// change already in is success), until it is in or ctx ends.
func (p *Peer) ChangeShardMembership(ctx context.Context, req *brokerv1.ChangeShardMembershipRequest) (*brokerv1.ChangeShardMembershipResponse, error) {
	if bad := validate.ChangeShardMembership(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	shard := req.GetShardId()
	if err := p.hosting(shard); err != nil {
		return nil, err
	}
	var err error
	switch req.GetChange() {
	case brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_NON_VOTING:
		err = p.moves.AddLearner(ctx, shard, req.GetReplicaId(), req.GetRaftAddr())
	case brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_VOTER:
		err = p.moves.Promote(ctx, shard, req.GetReplicaId(), req.GetRaftAddr())
	case brokerv1.MembershipChange_MEMBERSHIP_CHANGE_DELETE:
		err = p.moves.RemoveReplica(ctx, shard, req.GetReplicaId())
	}
	if err != nil {
		return nil, err
	}
	return &brokerv1.ChangeShardMembershipResponse{NodeId: p.node}, nil
}

// TransferShardLeader queues a leadership transfer of a hosted shard
// through host.Moves.TransferLeadership: only the leader's own host starts one
// (ending its lease first), so a follower answers NotLeader naming the
// leader, which the executor asks next.
func (p *Peer) TransferShardLeader(ctx context.Context, req *brokerv1.TransferShardLeaderRequest) (*brokerv1.TransferShardLeaderResponse, error) {
	if bad := validate.TransferShardLeader(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	shard := req.GetShardId()
	if err := p.hosting(shard); err != nil {
		return nil, err
	}
	if err := p.moves.TransferLeadership(ctx, shard, req.GetToNodeId()); err != nil {
		if errors.Is(err, host.ErrNoReplicaOnNode) {
			return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "to_node_id", Description: err.Error()})
		}
		return nil, err
	}
	return &brokerv1.TransferShardLeaderResponse{LeaderNodeId: p.node}, nil
}

// hosting is nil when a replica of shard runs here, else
// FailedPrecondition naming the shard.
func (p *Peer) hosting(shard uint64) error {
	if p.replicas.HostsShard(shard) {
		return nil
	}
	return apierr.FailedPrecondition(apierr.FieldViolation{
		Field: "shard_id", Description: fmt.Sprintf("node %d holds no replica of shard %d", p.node, shard),
	})
}
