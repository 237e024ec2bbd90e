package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/meta"
)

// Errors of Join; the errors returned wrap one and say what to do.
var (
	// ErrNodeIDTaken: the node id asked for is registered with another
	// data dir, or was removed from the meta group and cannot come back.
	ErrNodeIDTaken = errors.New("host: node id taken")
	// ErrOtherCluster: the joining data dir belongs to another cluster.
	ErrOtherCluster = errors.New("host: data dir of another cluster")
	// ErrNotBootstrapped: the cluster has no cluster id yet, so there is
	// nothing to join; the join may be retried.
	ErrNotBootstrapped = errors.New("host: cluster not bootstrapped yet")
)

// NotMetaLeaderError answers a join on a broker that does not lead the
// meta group: Leader and LeaderAddr (its gRPC address) name the one that
// does, 0 and empty when unknown.
type NotMetaLeaderError struct {
	Leader     uint64
	LeaderAddr string
}

func (e *NotMetaLeaderError) Error() string {
	if e.Leader == 0 {
		return "host: meta group leader unknown"
	}
	return fmt.Sprintf("host: meta group led by node %d at %s", e.Leader, e.LeaderAddr)
}

// Join registers n, a broker joining the cluster (n.ID 0: assign one), and
// adds it to the meta group as a non-voting member, so its meta replica
// started with join receives the meta state. clusterID is the cluster id
// its data dir holds, empty if none. Only the meta leader joins nodes: any
// other broker answers a *NotMetaLeaderError. A join repeated by the same
// data dir answers the same node, adding the member only if it is missing.
// use is the join token presented (nil: none, and none required); the
// meta entry refuses a bad one with a *JoinDeniedError and spends a use
// of a good one.
func (m *MetaClient) Join(ctx context.Context, n meta.Node, clusterID string, use *meta.JoinUse) (meta.Node, error) {
	if leader := m.MetaLeader(); leader != m.self {
		e := &NotMetaLeaderError{Leader: leader}
		if ln, ok := m.Meta().Nodes[meta.NodeID(leader)]; ok {
			e.LeaderAddr = ln.GRPCAddr
		}
		return meta.Node{}, e
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	ms, err := m.nh.SyncGetShardMembership(ctx, meta.ShardID)
	if err != nil {
		return meta.Node{}, err
	}
	if _, removed := ms.Removed[uint64(n.ID)]; removed && n.ID != 0 {
		return meta.Node{}, fmt.Errorf("%w: node %d was removed from the meta group and cannot rejoin under that id; join with another node id or with node_id 0", ErrNodeIDTaken, n.ID)
	}
	c := &meta.Command{Op: meta.OpJoinNode, Node: &n, ClusterID: clusterID, JoinUse: use}
	code, data, err := m.ProposeMeta(ctx, c)
	if err != nil {
		return meta.Node{}, err
	}
	st := m.Meta()
	switch code {
	case meta.ResultOK, meta.ResultNoop:
	case meta.ResultDenied:
		return meta.Node{}, &JoinDeniedError{Reason: deniedReason(data)}
	case meta.ResultExists:
		return meta.Node{}, fmt.Errorf("%w: node %d is already registered with another data dir; "+
			"start the joining broker with another node id, or with none to be given a free one", ErrNodeIDTaken, n.ID)
	default:
		if clusterID != "" && st.ClusterID != "" && clusterID != st.ClusterID {
			return meta.Node{}, fmt.Errorf("%w: the joining data dir belongs to cluster %s, but this is cluster %s; "+
				"start the broker on an empty data dir to join this cluster", ErrOtherCluster, clusterID, st.ClusterID)
		}
		return meta.Node{}, fmt.Errorf("%w: start the initial members first, then join", ErrNotBootstrapped)
	}
	var joined meta.Node
	if err := json.Unmarshal(data, &joined); err != nil {
		return meta.Node{}, fmt.Errorf("host: join_node answered %q: %w", data, err)
	}
	if _, removed := ms.Removed[uint64(joined.ID)]; removed {
		return meta.Node{}, fmt.Errorf("%w: node id %d was removed from the meta group; join with another node id", ErrNodeIDTaken, joined.ID)
	}
	_, voter := ms.Nodes[uint64(joined.ID)]
	_, nonVoting := ms.NonVotings[uint64(joined.ID)]
	if !voter && !nonVoting {
		if err := m.nh.SyncRequestAddNonVoting(ctx, meta.ShardID, uint64(joined.ID), joined.RaftAddr, ms.ConfigChangeID); err != nil {
			return meta.Node{}, fmt.Errorf("host: add node %d to the meta group: %w", joined.ID, err)
		}
	}
	m.log.Info("node joined", zap.Uint64("joined_node_id", uint64(joined.ID)), zap.String("raft_addr", joined.RaftAddr), zap.String("grpc_addr", joined.GRPCAddr))
	return joined, nil
}
