package service

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Peer serves brokerv1.Peer: what this broker knows about the cluster, for
// brokers that start (see package identity).
type Peer struct {
	brokerv1.UnimplementedPeerServer
	host *host.Host
	node uint64
}

// NewPeer returns the Peer service of node.
func NewPeer(h *host.Host, node uint64) *Peer {
	return &Peer{host: h, node: node}
}

// Identify answers from the meta state this broker applied, without a
// quorum read: it must answer while the meta group has no leader.
func (p *Peer) Identify(context.Context, *brokerv1.IdentifyRequest) (*brokerv1.IdentifyResponse, error) {
	st := p.host.Meta()
	resp := &brokerv1.IdentifyResponse{NodeId: p.node, ClusterId: st.ClusterID, ShardLeaders: p.host.LocalShardLeaders()}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		resp.Nodes = append(resp.Nodes, &brokerv1.KnownNode{NodeId: uint64(n.ID), Incarnation: n.Incarnation, State: string(n.State)})
	}
	return resp, nil
}

// AddToCluster refuses: this broker is a member already (a waiting
// broker serves AddToCluster from the broker package until it is added).
func (p *Peer) AddToCluster(context.Context, *brokerv1.AddToClusterRequest) (*brokerv1.AddToClusterResponse, error) {
	return nil, status.Errorf(codes.FailedPrecondition, "broker is node %d of cluster %s already", p.node, p.host.Meta().ClusterID)
}
