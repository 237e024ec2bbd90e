package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"

	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// PeerProber probes nodes with Peer.Identify, which a broker answers from
// its applied meta state without a quorum: an answer naming the node's id
// is a sign of life, whatever the state of its Raft groups. It is the one
// "does this node answer as node N" check of a broker: the healer's
// probes, and the liveness checks of node removal and the meta-voter
// policy, share one PeerProber. It keeps one
// connection per address, redialled within a couple of seconds of a node
// coming back (gRPC's default reconnect backoff grows to two minutes).
// Safe for concurrent use; Close ends its connections.
type PeerProber struct {
	creds credentials.TransportCredentials // of every probe's connection
	mu    sync.Mutex                       // guards conns
	conns map[string]*grpc.ClientConn
}

// NewPeerProber returns a prober without connections.
func NewPeerProber(creds credentials.TransportCredentials) *PeerProber {
	return &PeerProber{creds: creds, conns: map[string]*grpc.ClientConn{}}
}

// Probe asks the broker at grpcAddr to identify itself as node id.
func (p *PeerProber) Probe(ctx context.Context, id meta.NodeID, grpcAddr string) error {
	if grpcAddr == "" {
		return fmt.Errorf("operator: node %d has no grpc address", id)
	}
	conn, err := p.conn(grpcAddr)
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

func (p *PeerProber) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("operator: dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// Close closes every connection.
func (p *PeerProber) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		c.Close()
		delete(p.conns, addr)
	}
}
