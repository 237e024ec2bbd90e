package operator

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/identity"
	"github.com/sundialmq/sundial/meta"
)

// The cluster's shards. On the broker leading the meta group, Shards makes
// the cluster-wide decisions about event shards that no operation carries:
//
//   - create the first shards once every initial member registered: an
//     add_shards bootstrap of ShardsConfig.Shards shards, which starts them
//     off the ring like shards added at runtime and names the cluster;
//   - name a cluster bootstrapped before cluster ids (a bootstrap_shards
//     with a cluster id, which only names a cluster that has shards);
//   - serve the starting shards (the first ones and those `shardctl shards
//     add` created) once every one of them has a leader and no seed-groups
//     operation is unfinished: serve_shards puts them all on the ring.
//
// Each of these meta commands is a no-op when repeated, so Shards keeps no
// state: every round decides from the meta state read linearizably, and a
// proposal that timed out after committing, or a new meta leader deciding
// again from the state its predecessor left, changes nothing twice. A
// meta-leader change at any point therefore leaves the new leader's round
// to finish the work. Brokers only register themselves and run the
// replicas placed on them (package host).
//
// Shards runs on its own goroutine (Start); the Executor starts one.

// ShardsHost is what Shards needs of the broker's host.
type ShardsHost interface {
	ReadMeta(ctx context.Context) (*meta.State, error)
	ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error)
	// MetaLeader is the node leading the meta group, 0 if unknown.
	MetaLeader() uint64
	// ShardLeader is the node leading shard, 0 if not known here.
	ShardLeader(shard uint64) uint64
}

// ShardsConfig is what Shards knows of the cluster's first shards.
type ShardsConfig struct {
	// InitialMembers are the node ids of the cluster's initial members
	// (the broker's initial_members); the first shards are created once
	// every one of them registered. Empty on a broker that joined a
	// running cluster: it never creates the first shards.
	InitialMembers []uint64
	// Shards is the number of first shards (the broker's shards).
	Shards int
	// ReplicationFactor of the first shards; 0 means min(3, initial
	// members).
	ReplicationFactor int
	// Poll is how often the meta leader looks at the meta state. Default
	// 500ms.
	Poll time.Duration
}

// Shard changes Shards counts (sundial_operator_shard_changes_total).
const (
	changeBootstrap   = "bootstrap"
	changeServe       = "serve"
	changeNameCluster = "name-cluster"
)

// Shards creates the first shards, names old clusters and serves starting
// shards while this node leads meta.
type Shards struct {
	host    ShardsHost
	self    uint64
	cfg     ShardsConfig
	log     *zap.Logger
	changes *prometheus.CounterVec // by change

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewShards returns the shard decisions of node self; Start runs them.
// reg may be nil (no metrics registered).
func NewShards(h ShardsHost, self uint64, cfg ShardsConfig, log *zap.Logger, reg prometheus.Registerer) *Shards {
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "operator", Name: "shard_changes_total",
		Help: "Shard changes this broker proposed as meta leader and the meta group applied: bootstrap (the first shards created), serve (starting shards put on the ring), name-cluster (a cluster bootstrapped before cluster ids named).",
	}, []string{"change"})
	for _, c := range []string{changeBootstrap, changeServe, changeNameCluster} {
		changes.WithLabelValues(c)
	}
	if reg != nil {
		reg.MustRegister(changes)
	}
	return &Shards{host: h, self: self, cfg: cfg, log: log.Named("operator"), changes: changes}
}

// Start runs a round every Poll until Stop.
func (s *Shards) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.cfg.Poll)
		defer t.Stop()
		for {
			s.Step(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and waits for it.
func (s *Shards) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
}

// Step runs one round: while this node leads meta it proposes, from the
// meta state it reads, the first shards, the cluster's name or the
// serving of the starting shards, whichever the state waits for. It does
// nothing on other nodes.
func (s *Shards) Step(ctx context.Context) {
	if s.host.MetaLeader() != s.self {
		return
	}
	st, err := s.host.ReadMeta(ctx)
	if err != nil {
		return
	}
	switch {
	case len(st.Shards) == 0:
		s.bootstrap(ctx, st)
	case st.ClusterID == "":
		// Bootstrapped before cluster ids: this bootstrap only names it
		// (its count and replication factor are not used).
		id := identity.NewClusterID()
		if _, ok := s.propose(ctx, changeNameCluster, &meta.Command{Op: meta.OpBootstrapShards, Count: 1, RF: 1, ClusterID: id}); ok {
			s.log.Info("cluster bootstrapped before cluster ids: named", zap.String("cluster_id", id))
		}
	default:
		s.serve(ctx, st)
	}
}

// bootstrap proposes the first shards once every initial member is
// registered.
func (s *Shards) bootstrap(ctx context.Context, st *meta.State) {
	if len(s.cfg.InitialMembers) == 0 {
		return
	}
	for _, id := range s.cfg.InitialMembers {
		if _, ok := st.Nodes[meta.NodeID(id)]; !ok {
			return
		}
	}
	rf := s.cfg.ReplicationFactor
	if rf == 0 {
		rf = min(3, len(s.cfg.InitialMembers))
	}
	c := &meta.Command{Op: meta.OpAddShards, Bootstrap: true, Count: s.cfg.Shards, RF: rf,
		ClusterID: identity.NewClusterID(), ZoneLabel: meta.ZoneLabel}
	if data, ok := s.propose(ctx, changeBootstrap, c); ok {
		s.log.Info("initial members registered: creating the first shards", zap.Int("shards", s.cfg.Shards),
			zap.Int("replication_factor", rf), zap.Any("shard_ids", shardIDs(data)))
	}
}

// serve proposes serve_shards once every starting shard has a leader and
// the seed-groups operations registered the topics' groups on them (the
// Executor runs those).
func (s *Shards) serve(ctx context.Context, st *meta.State) {
	starting := st.StartingShards()
	if len(starting) == 0 || st.Seeding() {
		return
	}
	for _, id := range starting {
		if s.host.ShardLeader(uint64(id)) == 0 {
			return
		}
	}
	if _, ok := s.propose(ctx, changeServe, &meta.Command{Op: meta.OpServeShards, Shards: starting}); ok {
		s.log.Info("new shards have leaders: serving them", zap.Int("shards", len(starting)), zap.Any("shard_ids", starting))
	}
}

// propose commits c and answers its result's data and whether it changed
// the meta state (not a no-op of a change already made), counting it as
// change when it did.
func (s *Shards) propose(ctx context.Context, change string, c *meta.Command) ([]byte, bool) {
	code, data, err := s.host.ProposeMeta(ctx, c)
	if err != nil {
		s.log.Debug("shard change not committed yet", zap.String("op", string(c.Op)), zap.Error(err))
		return nil, false
	}
	if code != meta.ResultOK {
		s.log.Debug("shard change not applied", zap.String("op", string(c.Op)), zap.Uint64("result", code))
		return nil, false
	}
	s.changes.WithLabelValues(change).Inc()
	return data, true
}

// shardIDs decodes the shard ids an add_shards answers.
func shardIDs(data []byte) []meta.EventShardID {
	var ids []meta.EventShardID
	_ = json.Unmarshal(data, &ids) // the state machine's own encoding of a list of ids
	return ids
}
