package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/broker/internal/identity"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Errors of a refused start; Start's error wraps one and says what to do.
var (
	// ErrIdentityMismatch: the data dir belongs to another node id or
	// another cluster.
	ErrIdentityMismatch = identity.ErrMismatch
	// ErrUnsafeRejoin: the node id is a member its peers know, but the data
	// dir is empty or not the one the node ran on. Starting would rejoin
	// its Raft groups with an empty log, which can lose committed entries.
	ErrUnsafeRejoin = identity.ErrUnsafeRejoin
)

// peerTimeout bounds one peer's answer about the cluster at start.
const peerTimeout = 3 * time.Second

// admit decides whether this broker may start on its data dir (see
// identity.Check), asking the initial members what they know about this
// node, and writes the identity of a data dir used for the first time. It
// runs before anything is created in the data dir.
func (s *Server) admit(ctx context.Context) (identity.Identity, error) {
	dir := s.cfg.DataDir
	id, found, err := identity.Load(dir)
	if err != nil {
		return identity.Identity{}, fmt.Errorf("broker: %w", err)
	}
	local := identity.Local{NodeID: s.cfg.NodeID, DataDir: dir, HasData: identity.HasData(dir)}
	if found {
		local.Identity = &id
	}
	if err := identity.Check(local, s.askPeers(ctx)); err != nil {
		return identity.Identity{}, fmt.Errorf("broker: refusing to start node %d: %w", s.cfg.NodeID, err)
	}
	if !found {
		id = identity.New(s.cfg.NodeID)
		if err := identity.Save(dir, id); err != nil {
			return identity.Identity{}, fmt.Errorf("broker: %w", err)
		}
		s.log.Info("data dir identity created", zap.String("data_dir", dir), zap.String("incarnation", id.Incarnation), zap.Bool("had_data", local.HasData))
	}
	return id, nil
}

// askPeers asks every other initial member, at once, what its meta replica
// knows. Peers that do not answer within peerTimeout are left out.
func (s *Server) askPeers(ctx context.Context) []identity.Peer {
	var (
		mu    sync.Mutex
		peers []identity.Peer
		wg    sync.WaitGroup
	)
	for node, m := range s.cfg.InitialMembers {
		if node == s.cfg.NodeID || m.GRPCAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := askPeer(ctx, m.GRPCAddr)
			if err != nil {
				s.log.Debug("peer did not identify", zap.Uint64("peer_node_id", node), zap.String("addr", m.GRPCAddr), zap.Error(err))
				return
			}
			mu.Lock()
			peers = append(peers, p)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return peers
}

func askPeer(ctx context.Context, addr string) (identity.Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return identity.Peer{}, err
	}
	defer conn.Close()
	resp, err := brokerv1.NewPeerClient(conn).Identify(ctx, &brokerv1.IdentifyRequest{})
	if err != nil {
		return identity.Peer{}, err
	}
	p := identity.Peer{NodeID: resp.GetNodeId(), Addr: addr, ClusterID: resp.GetClusterId(), Known: map[uint64]string{}}
	for _, n := range resp.GetNodes() {
		p.Known[n.GetNodeId()] = n.GetIncarnation()
	}
	return p, nil
}
