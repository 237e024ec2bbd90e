package operator

import (
	"context"
	"fmt"

	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// PeerProber probes nodes with Peer.Identify, which a broker answers from
// its applied meta state without a quorum: an answer naming the node's id
// is a sign of life, whatever the state of its Raft groups. It is the one
// "does this node answer as node N" check of a broker: the healer's
// probes, and the liveness checks of node removal and the meta-voter
// policy, share one PeerProber. It calls over the broker's peer
// connections (package peer), which redial a node within a couple of
// seconds of its coming back. Safe for concurrent use.
type PeerProber struct {
	peers *peer.Conns
}

// NewPeerProber returns a prober calling over peers.
func NewPeerProber(peers *peer.Conns) *PeerProber {
	return &PeerProber{peers: peers}
}

// Probe asks the broker at grpcAddr to identify itself as node id.
func (p *PeerProber) Probe(ctx context.Context, id meta.NodeID, grpcAddr string) error {
	if grpcAddr == "" {
		return fmt.Errorf("operator: node %d has no grpc address", id)
	}
	conn, err := p.peers.Conn(grpcAddr)
	if err != nil {
		return err
	}
	resp, err := brokerv1.NewPeerClient(conn).Identify(ctx, &brokerv1.IdentifyRequest{})
	if err != nil {
		return err
	}
	if resp.GetNodeId() != uint64(id) {
		return fmt.Errorf("operator: %s answers as node %d, not node %d", grpcAddr, resp.GetNodeId(), id)
	}
	return nil
}
