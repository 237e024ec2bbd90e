package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Routed moves. Dragonboat changes a shard's membership through a replica
// of the shard on the NodeHost asked, yet the executor runs on the meta
// leader, which holds replicas of a few shards only once a cluster has
// more nodes than the replication factor. So RoutedHost, the executor's
// Host on a broker, changes a shard through this node's replica when it
// holds one, and otherwise asks a broker that hosts the shard over the
// Peer service: the shard's leader first (as this node or leader gossip
// sees it), then the other nodes meta places a replica on. A host that
// cannot answer (unreachable, no replica any more, a temporary Dragonboat
// error) passes the call to the next; a refusal (a bad request, a node
// without a replica to lead) ends it. Rounds over the hosts repeat until
// the step's context ends.
const (
	// peerCallTimeout bounds one call to one host, so a frozen host
	// leaves time for the next within a step's timeout.
	peerCallTimeout = 10 * time.Second
	// peerRetryInterval separates rounds over the hosts.
	peerRetryInterval = 200 * time.Millisecond
)

// errNoHost is the last error of a round with no host to ask.
var errNoHost = errors.New("operator: no other node is placed with a replica of the shard")

// ReplicaHost is what RoutedHost needs of the broker's host
// (host.MetaClient, host.Replicas and host.Moves, composed by the broker):
// the meta state, and this node's replicas of the shards.
type ReplicaHost interface {
	ReadMeta(ctx context.Context) (*meta.State, error)
	ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error)
	// Meta is the meta state as this node last applied it.
	Meta() *meta.State
	MetaLeader() uint64
	// HostsShard reports whether this node runs a replica of shard.
	HostsShard(shard uint64) bool
	// ShardLeader is the leader a hosted shard's replica knows of;
	// ShardLeaders is every shard's leader as leader gossip last reported.
	ShardLeader(shard uint64) uint64
	ShardLeaders() map[uint64]uint64
	AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error
	Promote(ctx context.Context, shard, replica uint64, raftAddr string) error
	RemoveReplica(ctx context.Context, shard, replica uint64) error
	// TransferLeadership queues a transfer on this node's replica, which
	// must lead shard: a follower answers an error with a NotShardLeader
	// method (host.NotShardLeaderError).
	TransferLeadership(ctx context.Context, shard, toNode uint64) error
}

// notShardLeader is the error a replica that does not lead its shard
// answers a transfer with (host.NotShardLeaderError).
type notShardLeader interface {
	error
	NotShardLeader() bool
}

// RoutedHost is the executor's Host on a broker: the host for the meta
// state, the host or a peer for the changes of a shard.
type RoutedHost struct {
	h     ReplicaHost
	self  uint64
	log   *zap.Logger
	peers *peer.Conns
	calls *prometheus.CounterVec // by call and result
}

// NewRoutedHost returns the executor's Host for node self over h; it calls
// other brokers over peers, and its sundial_operator_peer_calls_total is
// registered with reg (nil: none).
func NewRoutedHost(h ReplicaHost, self uint64, peers *peer.Conns, log *zap.Logger, reg prometheus.Registerer) *RoutedHost {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "operator", Name: "peer_calls_total",
		Help: "Membership and leadership changes the executor asked of another broker hosting the shard (the meta leader holds no replica of it, or a transfer goes to the leader), by call and result (ok, passed: the host could not answer, or does not lead the shard it was asked to transfer, and the next was asked, refused).",
	}, []string{"call", "result"})
	for _, c := range []string{"add-learner", "promote", "remove-replica", "transfer-leader"} {
		for _, r := range []string{"ok", "passed", "refused"} {
			calls.WithLabelValues(c, r)
		}
	}
	if reg != nil {
		reg.MustRegister(calls)
	}
	return &RoutedHost{h: h, self: self, log: log.Named("operator"), peers: peers, calls: calls}
}

// ReadMeta reads the meta state through the host (linearizable).
func (m *RoutedHost) ReadMeta(ctx context.Context) (*meta.State, error) { return m.h.ReadMeta(ctx) }

// ProposeMeta proposes c to the meta group through the host.
func (m *RoutedHost) ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error) {
	return m.h.ProposeMeta(ctx, c)
}

// MetaLeader is the node leading the meta group, 0 if unknown.
func (m *RoutedHost) MetaLeader() uint64 { return m.h.MetaLeader() }

// ShardLeader is the leader this node sees for a hosted shard, else the
// one leader gossip last reported.
func (m *RoutedHost) ShardLeader(shard uint64) uint64 {
	if m.h.HostsShard(shard) {
		return m.h.ShardLeader(shard)
	}
	return m.h.ShardLeaders()[shard]
}

// AddLearner adds replica on raftAddr to shard as a non-voting member,
// through this node's replica of shard or else a peer hosting it.
func (m *RoutedHost) AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error {
	if m.h.HostsShard(shard) {
		return m.h.AddLearner(ctx, shard, replica, raftAddr)
	}
	return m.change(ctx, "add-learner", &brokerv1.ChangeShardMembershipRequest{
		ShardId: shard, Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_NON_VOTING, ReplicaId: replica, RaftAddr: raftAddr})
}

// Promote makes replica a voter of shard, through this node's replica
// of shard or else a peer hosting it.
func (m *RoutedHost) Promote(ctx context.Context, shard, replica uint64, raftAddr string) error {
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
func (m *RoutedHost) RemoveReplica(ctx context.Context, shard, replica uint64) error {
	if m.h.HostsShard(shard) && !m.own(shard, replica) {
		return m.h.RemoveReplica(ctx, shard, replica)
	}
	return m.change(ctx, "remove-replica", &brokerv1.ChangeShardMembershipRequest{
		ShardId: shard, Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_DELETE, ReplicaId: replica})
}

// TransferLeadership asks the shard's leader to transfer, as only the
// leader's own host may (host.Moves.TransferLeadership: it ends its dispatcher's
// lease first): this node's replica when it leads, else the other hosts,
// the leader first; a follower answers NotLeader and the next is asked.
func (m *RoutedHost) TransferLeadership(ctx context.Context, shard, toNode uint64) error {
	var local func() error
	if m.h.HostsShard(shard) {
		local = func() error { return m.h.TransferLeadership(ctx, shard, toNode) }
	}
	return m.viaPeers(ctx, shard, "transfer-leader", local, func(ctx context.Context, c brokerv1.PeerClient) error {
		_, err := c.TransferShardLeader(ctx, &brokerv1.TransferShardLeaderRequest{ShardId: shard, ToNodeId: toNode})
		return err
	})
}

// own reports whether meta places replica of shard on this node.
func (m *RoutedHost) own(shard, replica uint64) bool {
	sh, ok := m.h.Meta().Shards[meta.EventShardID(shard)]
	if !ok {
		return false
	}
	r, ok := sh.ReplicaOn(meta.NodeID(m.self))
	return ok && uint64(r.ID) == replica
}

func (m *RoutedHost) change(ctx context.Context, call string, req *brokerv1.ChangeShardMembershipRequest) error {
	return m.viaPeers(ctx, req.GetShardId(), call, nil, func(ctx context.Context, c brokerv1.PeerClient) error {
		_, err := c.ChangeShardMembership(ctx, req)
		return err
	})
}

// viaPeers runs do against the other hosts of shard, in order, until one
// answers or refuses, in rounds until ctx ends. A round first runs local,
// when not nil, on this node's replica: a notShardLeader error from it
// passes to the other hosts, any other answer ends the call.
func (m *RoutedHost) viaPeers(ctx context.Context, shard uint64, call string, local func() error, do func(context.Context, brokerv1.PeerClient) error) error {
	for {
		last := errNoHost
		if local != nil {
			var nl notShardLeader
			if err := local(); !errors.As(err, &nl) || !nl.NotShardLeader() {
				return err
			}
			last = nl
		}
		for _, n := range m.hostsOf(shard) {
			conn, err := m.peers.Conn(n.GRPCAddr)
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
// no replica of the shard (any more), does not lead it (a transfer), or
// predates the call.
func passes(err error) bool {
	if _, ok := apierr.AsNotLeader(err); ok {
		return true
	}
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
func (m *RoutedHost) hostsOf(shard uint64) []*meta.Node {
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
