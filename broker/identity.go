package broker

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/identity"
	"github.com/sundialmq/sundial/broker/internal/join"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
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
	// ErrNodeRemoved: the node id was removed from the cluster
	// (shardctl remove-node); a removed id is never reused.
	ErrNodeRemoved = identity.ErrRemoved
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

// joinRetryInterval is the pause between rounds of join addresses that
// all failed to answer.
const joinRetryInterval = time.Second

// joinCluster is admit for a broker with Join. On the first start (no
// identity in the data dir) it asks the brokers in Join to register it
// (package join) and writes the identity with the node id and cluster id
// the cluster answered. On later starts the identity holds the cluster id:
// it skips the join and checks with those brokers, as admit does with the
// initial members, that the data dir is still this node's and cluster's.
// A data dir with data but no identity is refused: it is no joined
// node's.
//
// token is the join token to present (empty: JoinTokenFile's, if set).
func (s *Server) joinCluster(ctx context.Context, advertise, token string) (identity.Identity, error) {
	dir := s.cfg.DataDir
	id, found, err := identity.Load(dir)
	if err != nil {
		return identity.Identity{}, fmt.Errorf("broker: %w", err)
	}
	addrs, err := join.Resolve(ctx, s.cfg.Join, net.DefaultResolver)
	if err != nil {
		return identity.Identity{}, fmt.Errorf("broker: %w", err)
	}
	if found && id.ClusterID != "" {
		local := identity.Local{NodeID: id.NodeID, DataDir: dir, HasData: identity.HasData(dir), Identity: &id}
		if s.cfg.NodeID != 0 {
			local.NodeID = s.cfg.NodeID
		}
		if err := identity.Check(local, s.askAddrs(ctx, addrs)); err != nil {
			return identity.Identity{}, fmt.Errorf("broker: refusing to start node %d: %w", local.NodeID, err)
		}
		s.log.Info("data dir joined the cluster before: join skipped", zap.String("data_dir", dir), zap.Uint64("joined_node_id", id.NodeID), zap.String("cluster_id", id.ClusterID))
		return id, nil
	}
	switch {
	case found && s.cfg.NodeID != 0 && id.NodeID != s.cfg.NodeID:
		return identity.Identity{}, fmt.Errorf("broker: refusing to join: %w: data dir %s belongs to node %d, but this broker is configured as node %d",
			identity.ErrMismatch, dir, id.NodeID, s.cfg.NodeID)
	case !found && identity.HasData(dir):
		return identity.Identity{}, fmt.Errorf("broker: refusing to join: data dir %s holds data but no identity file: it is not a joined node's; "+
			"join with an empty data dir", dir)
	case !found:
		id = identity.New(s.cfg.NodeID)
	}
	if token == "" && s.cfg.JoinTokenFile != "" {
		b, err := os.ReadFile(s.cfg.JoinTokenFile)
		if err != nil {
			return identity.Identity{}, fmt.Errorf("broker: read join_token_file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	req := &sundialv1.JoinClusterRequest{NodeId: id.NodeID, RaftAddr: s.cfg.RaftAddr, GrpcAddr: advertise, Incarnation: id.Incarnation, ClusterId: id.ClusterID, Labels: s.cfg.Labels, JoinToken: token}
	jctx, cancel := context.WithTimeout(ctx, s.cfg.JoinTimeout)
	defer cancel()
	resp, err := join.Ask(jctx, s.peers, addrs, req, joinRetryInterval)
	if err != nil {
		return identity.Identity{}, fmt.Errorf("broker: join the cluster: %w", err)
	}
	id.NodeID, id.ClusterID = resp.GetNodeId(), resp.GetClusterId()
	if err := identity.Save(dir, id); err != nil {
		return identity.Identity{}, fmt.Errorf("broker: %w", err)
	}
	s.log.Info("joined the cluster", zap.Uint64("joined_node_id", id.NodeID), zap.String("cluster_id", id.ClusterID), zap.String("incarnation", id.Incarnation))
	return id, nil
}

// askAddrs asks the brokers at addrs, at once, what their meta replicas
// know; those that do not answer within peerTimeout are left out.
func (s *Server) askAddrs(ctx context.Context, addrs []string) []identity.Peer {
	var (
		mu    sync.Mutex
		peers []identity.Peer
		wg    sync.WaitGroup
	)
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := askPeer(ctx, s.peers, addr)
			if err != nil {
				s.log.Debug("broker did not identify", zap.String("addr", addr), zap.Error(err))
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

// askPeers asks every other initial member, at once, what its meta replica
// knows. Peers that do not answer within peerTimeout are left out.
func (s *Server) askPeers(ctx context.Context) []identity.Peer {
	var addrs []string
	for _, node := range slices.Sorted(maps.Keys(s.cfg.InitialMembers)) {
		if m := s.cfg.InitialMembers[node]; node != s.cfg.NodeID && m.GRPCAddr != "" {
			addrs = append(addrs, m.GRPCAddr)
		}
	}
	return s.askAddrs(ctx, addrs)
}

func askPeer(ctx context.Context, peers *peer.Conns, addr string) (identity.Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	conn, err := peers.Conn(addr)
	if err != nil {
		return identity.Peer{}, err
	}
	resp, err := brokerv1.NewPeerClient(conn).Identify(ctx, &brokerv1.IdentifyRequest{})
	if err != nil {
		return identity.Peer{}, err
	}
	p := identity.Peer{NodeID: resp.GetNodeId(), Addr: addr, ClusterID: resp.GetClusterId(), Known: map[uint64]string{}, Removed: map[uint64]bool{}, Starts: map[uint64]uint64{}}
	for _, n := range resp.GetNodes() {
		p.Known[n.GetNodeId()] = n.GetIncarnation()
		p.Starts[n.GetNodeId()] = n.GetStarts()
		if n.GetState() == string(meta.NodeRemoved) {
			p.Removed[n.GetNodeId()] = true
		}
	}
	return p, nil
}
