package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Routed moves. Dragonboat changes a shard's membership through a replica
// of the shard on the NodeHost asked, yet the executor runs on the meta
// leader, which holds replicas of a few shards only once a cluster has
// more nodes than the replication factor. So moveHost, the executor's
// operator.Host, changes a shard through this node's replica when it holds
// one, and otherwise asks a broker that hosts the shard over the Peer
// service: the shard's leader first (as this node or leader gossip sees
// it), then the other nodes meta places a replica on. A host that cannot
// answer (unreachable, no replica any more, a temporary Dragonboat error)
// passes the call to the next; a refusal (a bad request, a node without a
// replica to lead) ends it. Rounds over the hosts repeat until the step's
// context ends.
const (
	// peerCallTimeout bounds one call to one host, so a frozen host
	// leaves time for the next within a step's timeout.
	peerCallTimeout = 10 * time.Second
	// peerRetryInterval separates rounds over the hosts.
	peerRetryInterval = 200 * time.Millisecond
)

// errNoHost is the last error of a round with no host to ask.
var errNoHost = errors.New("broker: no other node is placed with a replica of the shard")

// moveHost is the executor's operator.Host: the host for the meta state,
// the host or a peer for the changes of a shard.
type moveHost struct {
	h     *host.Host
	self  uint64
	log   *zap.Logger
	conns *peerConns
	calls *prometheus.CounterVec // by call and result
}

func newMoveHost(h *host.Host, self uint64, creds credentials.TransportCredentials, log *zap.Logger, reg prometheus.Registerer) *moveHost {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "operator", Name: "peer_calls_total",
		Help: "Membership and leadership changes the executor asked of another broker hosting the shard (the meta leader holds no replica of it, or a transfer goes to the leader), by call and result (ok, passed: the host could not answer and the next was asked, refused).",
	}, []string{"call", "result"})
	for _, c := range []string{"add-learner", "promote", "remove-replica", "transfer-leader"} {
		for _, r := range []string{"ok", "passed", "refused"} {
			calls.WithLabelValues(c, r)
		}
	}
	if reg != nil {
		reg.MustRegister(calls)
	}
	return &moveHost{h: h, self: self, log: log.Named("operator"), conns: newPeerConns(creds), calls: calls}
}

func (m *moveHost) ReadMeta(ctx context.Context) (*meta.State, error) { return m.h.ReadMeta(ctx) }

func (m *moveHost) ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error) {
	return m.h.ProposeMeta(ctx, c)
}

func (m *moveHost) MetaLeader() uint64 { return m.h.MetaLeader() }

// ShardLeader is the leader this node sees for a hosted shard, else the
// one leader gossip last reported.
func (m *moveHost) ShardLeader(shard uint64) uint64 {
	if m.h.HostsShard(shard) {
		return m.h.ShardLeader(shard)
	}
	return m.h.ShardLeaders()[shard]
}

func (m *moveHost) AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error {
	if m.h.HostsShard(shard) {
		return m.h.AddLearner(ctx, shard, replica, raftAddr)
	}
	return m.change(ctx, "add-learner", &brokerv1.ChangeShardMembershipRequest{
		ShardId: shard, Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_NON_VOTING, ReplicaId: replica, RaftAddr: raftAddr})
}

func (m *moveHost) Promote(ctx context.Context, shard, replica uint64, raftAddr string) error {
	if m.h.HostsShard(shard) {
		return m.h.Promote(ctx, shard, replica, raftAddr)
	}
	return m.change(ctx, "promote", &brokerv1.ChangeShardMembershipRequest{
		ShardId: shard, Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_VOTER, ReplicaId: replica, RaftAddr: raftAddr})
}

// RemoveReplica removes this node's own replica through a peer: once the
// removal applies, the replica here is no longer a member and cannot read
// the membership to see the change in (Dragonboat drops its reads as
// not ready until it stops), so a local removal could never confirm.
func (m *moveHost) RemoveReplica(ctx context.Context, shard, replica uint64) error {
	if m.h.HostsShard(shard) && !m.own(shard, replica) {
		return m.h.RemoveReplica(ctx, shard, replica)
	}
	return m.change(ctx, "remove-replica", &brokerv1.ChangeShardMembershipRequest{
		ShardId: shard, Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_DELETE, ReplicaId: replica})
}

// TransferLeadership asks the shard's leader when another node leads it,
// so the leader ends its dispatcher's lease before the transfer; this
// node's replica when it leads or nobody else is known to.
func (m *moveHost) TransferLeadership(ctx context.Context, shard, toNode uint64) error {
	leader := m.ShardLeader(shard)
	if m.h.HostsShard(shard) && (leader == 0 || leader == m.self) {
		return m.h.TransferLeadership(shard, toNode)
	}
	return m.viaPeers(ctx, shard, "transfer-leader", func(ctx context.Context, c brokerv1.PeerClient) error {
		_, err := c.TransferShardLeader(ctx, &brokerv1.TransferShardLeaderRequest{ShardId: shard, ToNodeId: toNode})
		return err
	})
}

// own reports whether meta places replica of shard on this node.
func (m *moveHost) own(shard, replica uint64) bool {
	sh, ok := m.h.Meta().Shards[meta.EventShardID(shard)]
	if !ok {
		return false
	}
	r, ok := sh.ReplicaOn(meta.NodeID(m.self))
	return ok && uint64(r.ID) == replica
}

func (m *moveHost) change(ctx context.Context, call string, req *brokerv1.ChangeShardMembershipRequest) error {
	return m.viaPeers(ctx, req.GetShardId(), call, func(ctx context.Context, c brokerv1.PeerClient) error {
		_, err := c.ChangeShardMembership(ctx, req)
		return err
	})
}

// viaPeers runs do against the other hosts of shard, in order, until one
// answers or refuses, in rounds until ctx ends.
func (m *moveHost) viaPeers(ctx context.Context, shard uint64, call string, do func(context.Context, brokerv1.PeerClient) error) error {
	for {
		last := errNoHost
		for _, n := range m.hostsOf(shard) {
			conn, err := m.conns.get(n.GRPCAddr)
			if err != nil {
				last = fmt.Errorf("node %d: %w", n.ID, err)
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
			err = do(cctx, brokerv1.NewPeerClient(conn))
			cancel()
			switch {
			case err == nil:
				m.calls.WithLabelValues(call, "ok").Inc()
				m.log.Debug("shard change made by a peer", zap.String("call", call), zap.Uint64("shard_id", shard), zap.Uint64("node_id", uint64(n.ID)))
				return nil
			case ctx.Err() != nil:
				return fmt.Errorf("shard %d %s on node %d: %w (%w)", shard, call, n.ID, ctx.Err(), err)
			case passes(err):
				m.calls.WithLabelValues(call, "passed").Inc()
				last = fmt.Errorf("node %d: %w", n.ID, err)
			default:
				m.calls.WithLabelValues(call, "refused").Inc()
				return fmt.Errorf("shard %d %s on node %d: %w", shard, call, n.ID, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d %s: no host answered: %w (last error %w)", shard, call, ctx.Err(), last)
		case <-time.After(peerRetryInterval):
		}
	}
}

// passes reports whether err from one host lets the next be asked: the
// host was unreachable or out of time, answered a temporary error, holds
// no replica of the shard (any more), or predates the call.
func passes(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unimplemented, codes.Aborted:
		return true
	case codes.FailedPrecondition:
		for _, v := range apierr.Violations(err) {
			if v.Field == "shard_id" {
				return true
			}
		}
	}
	return false
}

// hostsOf lists the other nodes meta places a replica of shard on, the
// shard's leader first.
func (m *moveHost) hostsOf(shard uint64) []*meta.Node {
	st := m.h.Meta()
	sh, ok := st.Shards[meta.EventShardID(shard)]
	if !ok {
		return nil
	}
	leader := meta.NodeID(m.ShardLeader(shard))
	var out []*meta.Node
	for _, r := range sh.Replicas {
		n := st.Nodes[r.Node]
		if n == nil || uint64(n.ID) == m.self || n.GRPCAddr == "" {
			continue
		}
		if n.ID == leader {
			out = append([]*meta.Node{n}, out...)
			continue
		}
		out = append(out, n)
	}
	return out
}

// close closes the peer connections; the executor must have stopped.
func (m *moveHost) close() { m.conns.close() }

// peerConns holds one client connection per peer gRPC address.
type peerConns struct {
	creds credentials.TransportCredentials
	mu    sync.Mutex // guards conns
	conns map[string]*grpc.ClientConn
}

func newPeerConns(creds credentials.TransportCredentials) *peerConns {
	return &peerConns{creds: creds, conns: map[string]*grpc.ClientConn{}}
}

func (p *peerConns) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.conns {
		c.Close()
		delete(p.conns, addr)
	}
}
