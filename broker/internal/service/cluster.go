package service

import (
	"context"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/meta"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Cluster serves sundialv1.Cluster: the routing table proxies follow, and
// leadership transfers (transfer.go).
type Cluster struct {
	sundialv1.UnimplementedClusterServer
	host     *host.Host // its Refusal
	meta     *host.MetaClient
	replicas *host.Replicas
	moves    *host.Moves
	// voters is the meta-voter policy: RemoveNode replaces a leaving
	// voter through it, and asks it which nodes answer.
	voters *operator.MetaVoters
	opts   Options
	log    *zap.Logger
	// healer names the nodes the meta leader's healer has not heard from
	// lately (Suspects), which the plans made here (Rebalance, DrainNode)
	// leave alone as targets; nil: none known.
	healer *operator.Healer
}

// NewCluster returns the Cluster service; voters is the meta-voter policy
// the healer uses too, healer the broker's healer (nil: no suspects known).
func NewCluster(h *host.Host, voters *operator.MetaVoters, healer *operator.Healer, opts Options, log *zap.Logger) *Cluster {
	return &Cluster{host: h, meta: h.MetaClient(), replicas: h.Replicas(), moves: h.Moves(), voters: voters, healer: healer, opts: opts, log: log.Named("cluster")}
}

// unavailable is the suspect nodes now, nil when none are known.
func (c *Cluster) unavailable() map[meta.NodeID]bool {
	if c.healer == nil {
		return nil
	}
	return c.healer.Suspects()
}

// WatchRouting sends the routing table now and after every change. A
// broker the meta state refused (removed from the cluster, or a data dir
// of another node) stopped its meta replica, so its table never changes
// again: the stream then ends with Unavailable, and the proxy following it
// watches another broker instead of routing by a stale table forever.
//
// A request with progress_interval_ms also gets a progress frame whenever
// nothing was sent for that long (clamped to [minProgressInterval,
// maxProgressInterval]), and every frame names the interval: a watcher
// that hears nothing for a few intervals knows this broker is frozen or
// cut off, not merely quiet, and watches another one.
func (c *Cluster) WatchRouting(req *sundialv1.WatchRoutingRequest, stream sundialv1.Cluster_WatchRoutingServer) error {
	interval := progressInterval(req.GetProgressIntervalMs())
	var progress <-chan time.Time
	var timer *time.Timer
	if interval > 0 {
		timer = time.NewTimer(interval)
		defer timer.Stop()
		progress = timer.C
	}
	send := func(rt *sundialv1.RoutingTable) error {
		rt.ProgressIntervalMs = interval.Milliseconds()
		if err := stream.Send(rt); err != nil {
			return err
		}
		if timer != nil {
			timer.Reset(interval)
		}
		return nil
	}
	var last *sundialv1.RoutingTable
	recheck := time.NewTicker(refusalRecheck)
	defer recheck.Stop()
	for {
		if err := c.host.Refusal(); err != nil {
			return status.Errorf(codes.Unavailable, "this broker serves no routing table: %v", err)
		}
		changed := c.replicas.Changed()
		st := c.meta.Meta()
		if len(st.Shards) > 0 {
			rt := routingTable(st, c.replicas.ShardLeaders(), false)
			if last == nil || !sameRouting(last, rt) {
				if err := send(rt); err != nil {
					return err
				}
				last = rt
			}
		}
		select {
		case <-changed:
		case <-recheck.C:
		case <-progress:
			// Before the first table too (no shards yet at bootstrap): the
			// watcher judges the silence of a stream from its start.
			if err := send(&sundialv1.RoutingTable{Version: last.GetVersion(), ProgressOnly: true}); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// Bounds of the progress interval a WatchRouting request may ask for.
const (
	minProgressInterval = 100 * time.Millisecond
	maxProgressInterval = 10 * time.Second
)

// progressInterval is the progress interval kept for a request asking for
// ms milliseconds: 0 (no progress frames) for 0 or less, else ms clamped
// to the bounds.
func progressInterval(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return min(max(time.Duration(ms)*time.Millisecond, minProgressInterval), maxProgressInterval)
}

// refusalRecheck is how often an open WatchRouting stream checks whether
// the meta state refused this broker: the refusal stops the meta replica,
// so no change of the table may come to wake the stream.
const refusalRecheck = time.Second

// ListShards answers the shards with their replicas and leaders.
func (c *Cluster) ListShards(ctx context.Context, _ *sundialv1.ListShardsRequest) (*sundialv1.ListShardsResponse, error) {
	st, err := c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	return &sundialv1.ListShardsResponse{Shards: routingTable(st, c.replicas.ShardLeaders(), true).Shards}, nil
}

// routingTable renders the meta state with the known shard leaders. It
// lists the shards on the ring, and the starting ones (marked) only
// withStarting: a proxy routes over every shard a table lists.
func routingTable(st *meta.State, leaders map[uint64]uint64, withStarting bool) *sundialv1.RoutingTable {
	rt := &sundialv1.RoutingTable{Version: st.Version}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		rt.Nodes = append(rt.Nodes, &sundialv1.Node{
			NodeId: uint64(n.ID), GrpcAddr: n.GRPCAddr, RaftAddr: n.RaftAddr,
			State: nodeState(n.State), MetaVoter: n.MetaVoter, Labels: maps.Clone(n.Labels),
		})
	}
	for _, id := range st.ShardIDs() {
		sh := st.Shards[id]
		if !sh.Serving() && !withStarting {
			continue
		}
		s := &sundialv1.Shard{ShardId: uint64(id), LeaderNodeId: leaders[uint64(id)], Starting: !sh.Serving()}
		for _, r := range sh.Replicas {
			s.Replicas = append(s.Replicas, &sundialv1.Replica{ReplicaId: uint64(r.ID), NodeId: uint64(r.Node)})
		}
		rt.Shards = append(rt.Shards, s)
	}
	for _, name := range st.TopicNames() {
		t := st.Topics[name]
		rt.Topics = append(rt.Topics, &sundialv1.TopicRoute{Name: name, Partitions: int32(t.Partitions), Groups: slices.Clone(t.Groups)})
	}
	rt.Handovers = handoversProto(st.Handovers)
	return rt
}

func handoversProto(hs []meta.Handover) []*sundialv1.Handover {
	out := make([]*sundialv1.Handover, 0, len(hs))
	for _, h := range hs {
		out = append(out, &sundialv1.Handover{
			Topic: h.Topic, Partition: h.Partition, FromShard: uint64(h.From), ToShard: uint64(h.To), OpenedAtUnixMs: h.OpenedAtMs,
			SealedAtUnixMs: h.SealedAtMs,
		})
	}
	return out
}

func sameRouting(a, b *sundialv1.RoutingTable) bool {
	if a.Version != b.Version || len(a.Shards) != len(b.Shards) {
		return false
	}
	for i := range a.Shards {
		if a.Shards[i].LeaderNodeId != b.Shards[i].LeaderNodeId {
			return false
		}
	}
	return true
}

func nodeState(s meta.NodeState) sundialv1.NodeState {
	switch s {
	case meta.NodeActive:
		return sundialv1.NodeState_NODE_STATE_ACTIVE
	case meta.NodeDraining:
		return sundialv1.NodeState_NODE_STATE_DRAINING
	case meta.NodeRemoved:
		return sundialv1.NodeState_NODE_STATE_REMOVED
	case meta.NodeDead:
		return sundialv1.NodeState_NODE_STATE_DEAD
	}
	return sundialv1.NodeState_NODE_STATE_UNSPECIFIED
}
