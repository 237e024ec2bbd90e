package broker

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Leader gossip. A broker sees the leaders of the shards it hosts only, yet
// the routing table it serves (WatchRouting, GetClusterInfo) must name every
// shard's leader: once a rebalance has spread replicas, a proxy watching one
// broker would otherwise find shards without a leader and report not ready.
// So every leaderGossipInterval the broker asks each active peer
// (Peer.Identify, answered without a quorum) which leaders it sees, and
// records them for the shards it does not host.
const (
	leaderGossipInterval = time.Second
	leaderGossipTimeout  = 500 * time.Millisecond
)

// gossipLeaders runs until stopc closes (or ctx ends).
func (s *Server) gossipLeaders(ctx context.Context, h *host.Host) {
	mc, replicas := h.MetaClient(), h.Replicas()
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := time.NewTicker(leaderGossipInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := mc.Meta()
		reports := s.askLeaders(ctx, st)
		replicas.SetPeerLeaders(mergeLeaders(st, reports))
	}
}

// askLeaders asks every other active node for the leaders it sees, at
// once, and answers the reports by node id (unreachable nodes left out).
func (s *Server) askLeaders(ctx context.Context, st *meta.State) map[uint64]map[uint64]uint64 {
	var mu sync.Mutex
	var wg sync.WaitGroup
	reports := map[uint64]map[uint64]uint64{}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if uint64(id) == s.cfg.NodeID || n.State != meta.NodeActive || n.GRPCAddr == "" {
			continue
		}
		conn, err := s.peers.Conn(n.GRPCAddr)
		if err != nil {
			s.log.Debug("leader gossip: dial peer", zap.Uint64("node_id", uint64(id)), zap.Error(err))
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, leaderGossipTimeout)
			defer cancel()
			resp, err := brokerv1.NewPeerClient(conn).Identify(ctx, &brokerv1.IdentifyRequest{})
			if err != nil {
				return
			}
			mu.Lock()
			reports[uint64(id)] = resp.GetShardLeaders()
			mu.Unlock()
		})
	}
	wg.Wait()
	return reports
}

// mergeLeaders picks one leader per shard from the peers' reports: a peer
// that reports itself leading a shard is believed first (it knows), else
// the report of the lowest node id that sees a leader; shards nobody
// reports a leader for are left out. Pure.
func mergeLeaders(st *meta.State, reports map[uint64]map[uint64]uint64) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, sid := range st.ShardIDs() {
		id := uint64(sid)
		var seen uint64
		for _, node := range st.NodeIDs() {
			leader := reports[uint64(node)][id]
			if leader == 0 {
				continue
			}
			if leader == uint64(node) {
				seen = leader
				break
			}
			if seen == 0 {
				seen = leader
			}
		}
		if seen != 0 {
			out[id] = seen
		}
	}
	return out
}
