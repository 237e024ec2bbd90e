package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/proposer"
	"github.com/sundialmq/sundial/broker/internal/store"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// Member is one initial member of the cluster.
type Member struct {
	RaftAddr string
	GRPCAddr string
}

// Config is what the host needs; broker.Config maps onto it.
type Config struct {
	NodeID   uint64
	RaftAddr string
	// RaftListenAddr is where Dragonboat listens; empty means RaftAddr.
	RaftListenAddr string
	GRPCAddr       string // advertised to proxies and peers
	DataDir        string
	InitialMembers map[uint64]Member
	// Join: this node is not an initial member but joined a running
	// cluster (see MetaClient.Join), which added it to the meta group as a non-voting
	// member; its meta replica starts with join on a new data dir.
	Join            bool
	RTT             time.Duration
	ElectionRTT     uint64
	HeartbeatRTT    uint64
	SnapshotEntries uint64
	// CompactionOverhead is the entries a shard's Raft log keeps behind a
	// snapshot for replicas that fell behind; 0 means SnapshotEntries / 2.
	CompactionOverhead uint64
	// RaftWorkers sizes Dragonboat's step, commit, apply, snapshot and
	// close worker pools; RaftLogShards is its number of LogDB shards.
	// Both are fixed for the life of a data dir.
	RaftWorkers   uint64
	RaftLogShards uint64
	// CacheBytes and MemTableBytes size the state DB (see store.Config).
	CacheBytes    int64
	MemTableBytes uint64
	Proposer      proposer.Config
	Dispatch      dispatch.Config
	Now           func() time.Time

	// Labels are the node's location labels, registered on its meta record.
	Labels map[string]string
	// Incarnation is the data dir's incarnation id (package identity); the
	// node registers with it in the meta state.
	Incarnation string
	// Starts is this start's count on the data dir (identity.Identity.Starts),
	// registered with the node; a meta record with a higher count means the
	// data dir is an older copy, and the host refuses to serve.
	Starts uint64
	// Run is a random id of this process, registered with Starts.
	Run string
	// ClusterID is the cluster id recorded in the data dir, empty if none
	// yet; RecordClusterID saves the meta state's when it is empty.
	ClusterID       string
	RecordClusterID func(clusterID string) error
	// HoldMeta, for tests only, keeps the cached meta state (Meta, and the
	// routing table WatchRouting streams) at its current version while it
	// answers true, as a broker whose meta replica lags would; nil never
	// holds. Linearizable reads (ReadMeta) are not held.
	HoldMeta func() bool
	// RaftTLS, when its CertFile is set, turns on Dragonboat's mutual TLS
	// on the Raft transport with these files (CA, certificate, key), which
	// Dragonboat reads only at start: rotate them by a rolling restart.
	RaftTLS tlsfiles.Files
}

// ErrNotMetaMember is returned for a node outside the initial members that
// did not join the cluster either (Config.Join).
var ErrNotMetaMember = errors.New("host: node is neither an initial member nor joining")

// Host runs a broker's replicas: it owns the NodeHost, the state DB and
// the host loop, and composes the small types callers reach through it:
// MetaClient (the meta group), Replicas (the replica and leader table),
// Moves (membership and leadership changes), and, for its own goroutines,
// placement (following the meta state's placement) and handovers.
type Host struct {
	cfg      Config
	log      *zap.Logger
	nh       *dragonboat.NodeHost
	db       *pebble.DB
	dispM    *dispatch.Metrics
	leaderG  *prometheus.GaugeVec
	routingG prometheus.Gauge
	shardsG  *prometheus.GaugeVec // by state: starting, serving
	handG    prometheus.Gauge     // open partition hand-overs
	// raftLogDone stops counting the Raft log's syncs on this host's
	// metrics (raftLogFS); called by Stop.
	raftLogDone func()
	stateSyncs  *stateSyncCollector

	meta      *MetaClient
	replicas  *Replicas
	moves     *Moves
	place     *placement
	handovers *handovers

	refusal   atomic.Pointer[error] // set once the meta state refused this node
	clusterID string                // the data dir's; run goroutine only

	events chan raftio.LeaderInfo
	stopc  chan struct{}
	cancel context.CancelFunc // ends the run loop's context; set by Start
	wg     sync.WaitGroup
}

// New opens the DB and the NodeHost; Start starts the replicas. A data
// dir fault Dragonboat finds meanwhile (see DataDirError) is returned.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Host, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	installRaftLogger(log)
	faultDir.Store(&dataDirOf{dir: cfg.DataDir, node: cfg.NodeID})
	db, err := store.Open(store.Config{Dir: filepath.Join(cfg.DataDir, "state"), CacheBytes: cfg.CacheBytes, MemTableBytes: cfg.MemTableBytes}, log)
	if err != nil {
		return nil, err
	}
	propM := proposer.NewMetrics(reg)
	h := &Host{
		cfg: cfg, log: log, db: db, clusterID: cfg.ClusterID,
		dispM: dispatch.NewMetrics(reg),
		leaderG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "shard_leader",
			Help: "1 for each event shard this broker leads.",
		}, []string{"shard_id"}),
		routingG: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "meta", Name: "routing_version",
			Help: "Routing version of the meta state this broker's meta replica applied.",
		}),
		shardsG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "meta", Name: "shards",
			Help: "Event shards in the meta state this broker's meta replica applied, by state (starting: created, not on the ring yet; serving).",
		}, []string{"state"}),
		handG: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "meta", Name: "handovers_open",
			Help: "Topic partitions handing over to a shard added to the ring, as this broker's meta replica applied them.",
		}),
		events: make(chan raftio.LeaderInfo, 1024),
		stopc:  make(chan struct{}),
	}
	h.meta = newMetaClient(cfg.NodeID, cfg.Now, log)
	h.replicas = newReplicas(cfg.NodeID, cfg.GRPCAddr, h.meta)
	h.stateSyncs = newStateSyncCollector(db)
	reg.MustRegister(h.leaderG, h.routingG, h.shardsG, h.handG, newNodeCollector(h), h.stateSyncs)
	nhCfg := nodeHostConfig(cfg, h)
	h.raftLogDone, err = raftLogFS.register(nhCfg.NodeHostDir, newRaftLogMetrics(reg))
	if err != nil {
		h.stateSyncs.close()
		db.Close()
		return nil, fmt.Errorf("host: raft dir: %w", err)
	}
	nh, err := newNodeHost(nhCfg)
	if err != nil {
		h.raftLogDone()
		h.stateSyncs.close()
		db.Close()
		// Dragonboat keeps its hard-setting errors in an internal package,
		// so only their text identifies them.
		if strings.Contains(err.Error(), "setting changed") || strings.Contains(err.Error(), "settings changed") {
			return nil, fmt.Errorf("host: start nodehost: %w: the data dir %s was created with other raft_workers or raft_log_shards than %d and %d; "+
				"start with the values it was created with (16 and 16 for data dirs made before these settings existed) or move it away",
				err, cfg.DataDir, cfg.RaftWorkers, cfg.RaftLogShards)
		}
		return nil, fmt.Errorf("host: start nodehost: %w", err)
	}
	h.nh = nh
	h.meta.nh, h.replicas.nh = nh, nh
	h.moves = &Moves{nh: nh, log: log, replicas: h.replicas, meta: h.meta}
	h.place = &placement{cfg: cfg, log: log, nh: nh, db: db, replicas: h.replicas, meta: h.meta, propM: propM}
	h.handovers = &handovers{now: cfg.Now, log: log, nh: nh, db: db, replicas: h.replicas, meta: h.meta}
	return h, nil
}

// newNodeHost is dragonboat.NewNodeHost, a data dir fault it panics on
// returned as the error.
func newNodeHost(cfg config.NodeHostConfig) (_ *dragonboat.NodeHost, err error) {
	defer recoverFault(&err)
	return dragonboat.NewNodeHost(cfg)
}

// nodeHostConfig is Dragonboat's configuration of a broker: a small LogDB
// (the default preallocates ~1.8 GB) and worker pools sized by cfg.
func nodeHostConfig(cfg Config, events raftio.IRaftEventListener) config.NodeHostConfig {
	expert := config.GetDefaultExpertConfig()
	expert.LogDB = config.GetTinyMemLogDBConfig()
	expert.LogDB.Shards = max(1, cfg.RaftLogShards)
	workers := max(1, cfg.RaftWorkers)
	expert.Engine.ExecShards = workers
	expert.Engine.CommitShards = workers
	expert.Engine.ApplyShards = workers
	expert.Engine.SnapshotShards = workers
	expert.Engine.CloseShards = workers
	return config.NodeHostConfig{
		NodeHostDir:       filepath.Join(cfg.DataDir, "raft"),
		RTTMillisecond:    uint64(cfg.RTT.Milliseconds()),
		RaftAddress:       cfg.RaftAddr,
		ListenAddress:     cfg.RaftListenAddr,
		RaftEventListener: events,
		Expert:            expert,
		MutualTLS:         cfg.RaftTLS.CertFile != "",
		CAFile:            cfg.RaftTLS.CAFile,
		CertFile:          cfg.RaftTLS.CertFile,
		KeyFile:           cfg.RaftTLS.KeyFile,
	}
}

// Start starts the meta replica and the loop that starts everything else.
// The loop keeps ctx's values but not its cancellation: the host runs until
// Stop, which also cancels the loop's meta proposals in flight. A data dir
// fault Dragonboat finds while it reads the log here is returned.
func (h *Host) Start(ctx context.Context) (err error) {
	defer recoverFault(&err)
	_, initial := h.cfg.InitialMembers[h.cfg.NodeID]
	if !initial && !h.cfg.Join {
		return fmt.Errorf("%w: node %d", ErrNotMetaMember, h.cfg.NodeID)
	}
	members := map[uint64]dragonboat.Target{}
	join := false
	if !h.nh.HasNodeInfo(meta.ShardID, h.cfg.NodeID) {
		if initial {
			for id, m := range h.cfg.InitialMembers {
				members[id] = m.RaftAddr
			}
		} else {
			join = true // the meta leader added this replica; it learns the members from it
		}
	}
	mc := shardConfig(h.cfg, meta.ShardID, h.cfg.NodeID)
	// A joined node was added as a non-voting member (Join); Dragonboat
	// requires its replica to start as one.
	mc.IsNonVoting = !initial
	err = h.nh.StartReplica(members, join, meta.NewStateMachine(func(uint64) { h.meta.signal() }), mc)
	if err != nil {
		return fmt.Errorf("host: start meta replica: %w", err)
	}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.wg.Add(2)
	go h.run(ctx)
	go func() {
		defer h.wg.Done()
		h.handovers.run(ctx, h.stopc)
	}()
	return nil
}

// Stop stops dispatchers, proposers, the NodeHost and the DB.
func (h *Host) Stop() {
	close(h.stopc)
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
	h.replicas.stopAll()
	h.nh.Close()
	h.raftLogDone()
	h.stateSyncs.close()
	if err := h.db.Close(); err != nil {
		h.log.Warn("close state db", zap.Error(err))
	}
}

// shardConfig is the Raft configuration of replicaID of shardID.
func shardConfig(cfg Config, shardID, replicaID uint64) config.Config {
	return config.Config{
		ShardID:             shardID,
		ReplicaID:           replicaID,
		ElectionRTT:         cfg.ElectionRTT,
		HeartbeatRTT:        cfg.HeartbeatRTT,
		CheckQuorum:         true,
		PreVote:             true,
		OrderedConfigChange: true,
		SnapshotEntries:     cfg.SnapshotEntries,
		CompactionOverhead:  compactionOverhead(cfg),
	}
}

func compactionOverhead(cfg Config) uint64 {
	if cfg.CompactionOverhead > 0 {
		return cfg.CompactionOverhead
	}
	return cfg.SnapshotEntries / 2
}

// LeaderUpdated is Dragonboat's leadership callback; it only posts.
func (h *Host) LeaderUpdated(info raftio.LeaderInfo) {
	select {
	case h.events <- info:
	default:
		// The loop is far behind; the tick re-reads leadership anyway.
		h.log.Warn("leader event dropped", zap.Uint64("shard_id", info.ShardID))
	}
}

func (h *Host) run(ctx context.Context) {
	defer h.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.stopc:
			return
		case info := <-h.events:
			h.leaderChanged(ctx, info.ShardID, info.LeaderID)
		case <-h.meta.applied:
			h.reconcile(ctx)
		case <-tick.C:
			h.reconcile(ctx)
			h.refreshLeaders(ctx)
		}
	}
}

// reconcile brings this node in line with the meta state: it registers
// the node, starts the replicas placed here (joining the ones an operation
// placed) and drops those no longer placed. It decides nothing for the
// cluster: the first shards and the serving of starting shards are the
// meta leader's executor's (operator.Shards).
func (h *Host) reconcile(ctx context.Context) {
	v, err := h.nh.StaleRead(meta.ShardID, meta.Query{})
	if err != nil {
		return // meta replica not ready yet
	}
	st := v.(*meta.State)
	if h.cfg.HoldMeta == nil || !h.cfg.HoldMeta() {
		h.routingG.Set(float64(st.Version))
		h.shardsG.WithLabelValues("starting").Set(float64(len(st.StartingShards())))
		h.shardsG.WithLabelValues("serving").Set(float64(len(st.RingShards())))
		h.handG.Set(float64(len(st.Handovers)))
		if old := h.meta.store(st); old.Version != st.Version {
			h.replicas.notifyChanged()
		}
	}
	if !h.admitted(st) {
		return
	}
	_, initial := h.cfg.InitialMembers[h.cfg.NodeID]
	self := meta.Node{ID: meta.NodeID(h.cfg.NodeID), RaftAddr: h.cfg.RaftAddr, GRPCAddr: h.cfg.GRPCAddr, State: meta.NodeActive, MetaVoter: initial, Incarnation: h.cfg.Incarnation, Labels: h.cfg.Labels, Starts: h.cfg.Starts, Run: h.cfg.Run}
	// A registered node's state and meta vote are the meta group's to
	// change (drain, remove, voter replacement): only its addresses,
	// incarnation and labels are its own.
	if n, ok := st.Nodes[self.ID]; !ok || n.RaftAddr != self.RaftAddr || n.GRPCAddr != self.GRPCAddr || n.Incarnation != self.Incarnation || !maps.Equal(n.Labels, self.Labels) || n.Starts != self.Starts || n.Run != self.Run {
		h.meta.propose(ctx, &meta.Command{Op: meta.OpRegisterNode, Node: &self})
		return
	}
	if len(st.Shards) == 0 {
		return // not bootstrapped yet: the meta leader's executor creates the first shards
	}
	h.place.startPlaced(ctx, st)
	h.place.dropUnplaced(ctx, st)
}

// refreshLeaders re-reads leadership of every shard, in case an event was
// dropped.
func (h *Host) refreshLeaders(ctx context.Context) {
	for _, id := range h.replicas.HostedShards() {
		leader, _, valid, err := h.nh.GetLeaderID(id)
		if err != nil {
			continue
		}
		if !valid {
			leader = 0
		}
		h.leaderChanged(ctx, id, leader)
	}
}

func (h *Host) leaderChanged(ctx context.Context, id, leader uint64) {
	if id == meta.ShardID {
		h.replicas.notifyChanged()
		return
	}
	h.replicas.mu.Lock()
	s, ok := h.replicas.shards[id]
	if !ok || s.leaderID == leader {
		h.replicas.mu.Unlock()
		return
	}
	s.leaderID = leader
	var stopping *dispatch.Dispatcher
	switch {
	case leader == s.replicaID && s.dispatcher == nil:
		dc := h.cfg.Dispatch
		dc.Policy = h.topicPolicy
		if dc.LeaderLeaseTimeout == 0 {
			dc.LeaderLeaseTimeout = h.electionTimeout() / 2
		}
		s.dispatcher = dispatch.New(id, h.db, s.proposer.Propose, s.proposer.Start, readIndex(h.nh, id, s.replicaID), h.cfg.Now, dc, h.log, h.dispM)
		s.dispatcher.Start() //nolint:contextcheck // dispatch.New gives each dispatcher its own context, cancelled by its Stop; it takes none from the host
		h.leaderG.WithLabelValues(fmt.Sprint(id)).Set(1)
		h.log.Info("shard leadership gained", zap.Uint64("shard_id", id))
	case leader != s.replicaID && s.dispatcher != nil:
		stopping = s.dispatcher
		s.dispatcher = nil
		h.leaderG.WithLabelValues(fmt.Sprint(id)).Set(0)
		h.log.Info("shard leadership lost", zap.Uint64("shard_id", id), zap.Uint64("leader_replica_id", leader))
	}
	h.replicas.mu.Unlock()
	if stopping != nil {
		stopping.Stop()
	}
	h.replicas.notifyChanged()
}

// electionTimeout is the shortest time after which a follower that stopped
// hearing from its leader may start an election.
func (h *Host) electionTimeout() time.Duration {
	return h.cfg.RTT * time.Duration(h.cfg.ElectionRTT)
}

// errNotLeading answers a barrier read on a replica that does not lead its
// shard (any more, or not in the term the read began in).
var errNotLeading = errors.New("host: replica does not lead the shard")

// readIndex is the dispatcher's barrier of a shard: a ReadIndex, which
// Dragonboat answers once a quorum confirmed the leader's commit index (a
// new leader's no-op included) and the local state machine applied it. A
// follower would forward the read to the leader, so the replica must lead
// the shard in the same term before and after.
func readIndex(nh *dragonboat.NodeHost, id, replicaID uint64) dispatch.ReadIndexFunc {
	return func(ctx context.Context) error {
		leader, term, valid, err := nh.GetLeaderID(id)
		if err != nil {
			return err
		}
		if !valid || leader != replicaID {
			return errNotLeading
		}
		deadline, ok := ctx.Deadline()
		if !ok {
			return dragonboat.ErrDeadlineNotSet
		}
		rs, err := nh.ReadIndex(id, time.Until(deadline))
		if err != nil {
			return err
		}
		select {
		case r := <-rs.AppliedC():
			rs.Release()
			switch {
			case r.Completed():
			case r.Dropped():
				return dragonboat.ErrShardNotReady // no entry of the term committed yet
			case r.Timeout():
				return dragonboat.ErrTimeout
			case r.Terminated():
				return dragonboat.ErrShardClosed
			default:
				return dragonboat.ErrAborted
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		if leader2, term2, valid2, err := nh.GetLeaderID(id); err != nil || !valid2 || leader2 != replicaID || term2 != term {
			return errNotLeading
		}
		return nil
	}
}

// MetaClient is this node's way to the meta group.
func (h *Host) MetaClient() *MetaClient { return h.meta }

// Replicas is the table of the replicas running here and of every shard's
// leader.
func (h *Host) Replicas() *Replicas { return h.replicas }

// Moves makes membership and leadership changes on this node's replicas.
func (h *Host) Moves() *Moves { return h.moves }

// DB exposes the state DB to the service layer (reads only).
func (h *Host) DB() *pebble.DB { return h.db }

// StateHash is the hash of the local replica's state of an event shard (see
// fsm.StateHash); replicas that applied the same entries answer the same.
func (h *Host) StateHash(shard uint64) ([]byte, error) {
	v, err := h.nh.StaleRead(shard, fsm.HashQuery{})
	if err != nil {
		return nil, err
	}
	return v.([]byte), nil
}

// topicPolicy answers the dispatch policy of a topic from the meta state.
// Dead-letter topics have no attempt limit.
func (h *Host) topicPolicy(topic string) dispatch.Policy {
	t, ok := h.meta.Meta().Topics[topic]
	if !ok {
		return dispatch.Policy{}
	}
	return dispatch.Policy{MaxAttempts: t.MaxAttempts, ReleaseRate: t.ReleaseRatePerSec, Partitions: t.Partitions, Fair: t.Kind == "fair", Weights: t.FairnessWeights}
}
