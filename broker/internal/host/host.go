package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
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
	// cluster (see Join), which added it to the meta group as a non-voting
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

// Host runs a broker's replicas.
type Host struct {
	cfg      Config
	log      *zap.Logger
	nh       *dragonboat.NodeHost
	db       *pebble.DB
	propM    *proposer.Metrics
	dispM    *dispatch.Metrics
	leaderG  *prometheus.GaugeVec
	routingG prometheus.Gauge
	shardsG  *prometheus.GaugeVec // by state: starting, serving
	handG    prometheus.Gauge     // open partition hand-overs
	// raftLogDone stops counting the Raft log's syncs on this host's
	// metrics (raftLogFS); called by Stop.
	raftLogDone func()
	stateSyncs  *stateSyncCollector

	metaState atomic.Pointer[meta.State]
	refusal   atomic.Pointer[error] // set once the meta state refused this node
	clusterID string                // the data dir's; run goroutine only

	mu     sync.RWMutex // guards shards, peerLeaders and changed
	shards map[uint64]*shard
	// peerLeaders: shard → leader node id as peers hosting the shard
	// reported it (SetPeerLeaders); used for shards not hosted here.
	peerLeaders map[uint64]uint64
	changed     chan struct{} // closed and replaced on every routing change

	events chan raftio.LeaderInfo
	metaCh chan struct{}
	stopc  chan struct{}
	cancel context.CancelFunc // ends the run loop's context; set by Start
	wg     sync.WaitGroup
}

type shard struct {
	id         uint64
	replicaID  uint64
	proposer   *proposer.Proposer
	dispatcher *dispatch.Dispatcher // non-nil while this node leads
	leaderID   uint64               // replica id of the known leader, 0 if none
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
	h := &Host{
		cfg: cfg, log: log, db: db, clusterID: cfg.ClusterID,
		propM: proposer.NewMetrics(reg),
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
		shards:  map[uint64]*shard{},
		changed: make(chan struct{}),
		events:  make(chan raftio.LeaderInfo, 1024),
		metaCh:  make(chan struct{}, 1),
		stopc:   make(chan struct{}),
	}
	h.stateSyncs = newStateSyncCollector(db)
	reg.MustRegister(h.leaderG, h.routingG, h.shardsG, h.handG, newNodeCollector(h), h.stateSyncs)
	h.metaState.Store(meta.NewState())
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
	mc := h.shardConfig(meta.ShardID, h.cfg.NodeID)
	// A joined node was added as a non-voting member (Join); Dragonboat
	// requires its replica to start as one.
	mc.IsNonVoting = !initial
	err = h.nh.StartReplica(members, join, meta.NewStateMachine(func(uint64) { h.signalMeta() }), mc)
	if err != nil {
		return fmt.Errorf("host: start meta replica: %w", err)
	}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.wg.Add(2)
	go h.run(ctx)
	go h.runHandovers(ctx)
	return nil
}

// Stop stops dispatchers, proposers, the NodeHost and the DB.
func (h *Host) Stop() {
	close(h.stopc)
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
	h.mu.Lock()
	for _, s := range h.shards {
		if s.dispatcher != nil {
			s.dispatcher.Stop()
			s.dispatcher = nil
		}
		s.proposer.Close()
	}
	h.mu.Unlock()
	h.nh.Close()
	h.raftLogDone()
	h.stateSyncs.close()
	if err := h.db.Close(); err != nil {
		h.log.Warn("close state db", zap.Error(err))
	}
}

func (h *Host) shardConfig(shardID, replicaID uint64) config.Config {
	return config.Config{
		ShardID:             shardID,
		ReplicaID:           replicaID,
		ElectionRTT:         h.cfg.ElectionRTT,
		HeartbeatRTT:        h.cfg.HeartbeatRTT,
		CheckQuorum:         true,
		PreVote:             true,
		OrderedConfigChange: true,
		SnapshotEntries:     h.cfg.SnapshotEntries,
		CompactionOverhead:  h.compactionOverhead(),
	}
}

func (h *Host) compactionOverhead() uint64 {
	if h.cfg.CompactionOverhead > 0 {
		return h.cfg.CompactionOverhead
	}
	return h.cfg.SnapshotEntries / 2
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

func (h *Host) signalMeta() {
	select {
	case h.metaCh <- struct{}{}:
	default:
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
		case <-h.metaCh:
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
		if old := h.metaState.Swap(st); old.Version != st.Version {
			h.notifyChanged()
		}
	}
	if !h.admitted(st) {
		return
	}
	_, initial := h.cfg.InitialMembers[h.cfg.NodeID]
	self := meta.Node{ID: meta.NodeID(h.cfg.NodeID), RaftAddr: h.cfg.RaftAddr, GRPCAddr: h.cfg.GRPCAddr, State: meta.NodeActive, MetaVoter: initial, Incarnation: h.cfg.Incarnation, Labels: h.cfg.Labels}
	// A registered node's state and meta vote are the meta group's to
	// change (drain, remove, voter replacement): only its addresses,
	// incarnation and labels are its own.
	if n, ok := st.Nodes[self.ID]; !ok || n.RaftAddr != self.RaftAddr || n.GRPCAddr != self.GRPCAddr || n.Incarnation != self.Incarnation || !maps.Equal(n.Labels, self.Labels) {
		h.proposeMeta(ctx, &meta.Command{Op: meta.OpRegisterNode, Node: &self})
		return
	}
	if len(st.Shards) == 0 {
		return // not bootstrapped yet: the meta leader's executor creates the first shards
	}
	for _, id := range st.ShardIDs() {
		sh := st.Shards[id]
		r, ok := sh.ReplicaOn(self.ID)
		if !ok {
			continue
		}
		h.mu.RLock()
		s, running := h.shards[uint64(id)]
		h.mu.RUnlock()
		if running && s.replicaID != uint64(r.ID) {
			// An earlier replica of the shard runs here: a move onto this
			// node rolled back and was planned again (a new replica id)
			// while this node was down or behind, so it never saw the
			// shard unplaced. The old replica left the membership (once
			// it applies that, Dragonboat stops it): drop it and its data,
			// then start the one placed.
			h.log.Warn("replacing a replica of an earlier placement", zap.Uint64("shard_id", uint64(id)),
				zap.Uint64("replica_id", s.replicaID), zap.Uint64("placed_replica_id", uint64(r.ID)))
			if err := h.dropReplica(ctx, uint64(id), s); err != nil {
				h.log.Error("drop a replica of an earlier placement", zap.Uint64("shard_id", uint64(id)), zap.Uint64("replica_id", s.replicaID), zap.Error(err))
				continue
			}
			running = false
		}
		if !running {
			start := h.startShard
			if r.Join {
				start = func(ctx context.Context, _ *meta.State, sh *meta.Shard, r meta.Replica) error {
					return h.startJoining(ctx, sh, r)
				}
			}
			switch err := start(ctx, st, sh, r); {
			case errors.Is(err, dragonboat.ErrReplicaRemoved):
				// A move took the replica off this node while it was down,
				// and this node's copy of the meta state predates the move:
				// the next meta update unplaces it here.
				h.log.Info("shard replica was moved off this node; waiting for the meta state to say so",
					zap.Uint64("shard_id", uint64(id)), zap.Uint64("replica_id", uint64(r.ID)))
			case err != nil:
				h.log.Error("start shard replica", zap.Uint64("shard_id", uint64(id)), zap.Error(err))
			}
		}
	}
	h.dropUnplaced(ctx, st)
}

func (h *Host) proposeMeta(ctx context.Context, c *meta.Command) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c.NowMs = h.cfg.Now().UnixMilli()
	if _, err := h.nh.SyncPropose(ctx, h.nh.GetNoOPSession(meta.ShardID), c.Encode()); err != nil {
		h.log.Debug("meta proposal not committed yet", zap.String("op", string(c.Op)), zap.Error(err))
	}
}

func (h *Host) startShard(ctx context.Context, st *meta.State, sh *meta.Shard, r meta.Replica) error {
	members := map[uint64]dragonboat.Target{}
	if !h.nh.HasNodeInfo(uint64(sh.ID), uint64(r.ID)) {
		for _, rep := range sh.Replicas {
			members[uint64(rep.ID)] = st.Nodes[rep.Node].RaftAddr
		}
	}
	return h.startReplica(ctx, sh, r, members, false)
}

// startReplica starts r of sh with members (none when it restarts on its
// data or joins a running shard); join is Dragonboat's join flag.
func (h *Host) startReplica(ctx context.Context, sh *meta.Shard, r meta.Replica, members map[uint64]dragonboat.Target, join bool) error {
	id := uint64(sh.ID)
	s := &shard{id: id, replicaID: uint64(r.ID)}
	s.proposer = proposer.New(ctx, h.nh, id, h.cfg.Proposer, h.log, h.propM)
	h.mu.Lock()
	h.shards[id] = s
	h.mu.Unlock()
	cfg := h.shardConfig(id, uint64(r.ID))
	// A replica placed by an operation (r.Join) was added as a non-voting
	// member (a learner), and the executor promotes it once it has caught
	// up. It starts non-voting on every start, not only the first: a restart
	// replays the Raft log after its last snapshot, and replaying its own
	// add-non-voting entry panics in a replica started voting ("is not a
	// nonVoting"). A promoted replica comes back voting either way: by
	// replaying its promotion, or, when a snapshot taken after the promotion
	// lists it as a voter, by Dragonboat restoring the snapshot's members at
	// start (raft.restoreRemotes turns a non-voting self into a follower).
	cfg.IsNonVoting = r.Join
	err := h.nh.StartOnDiskReplica(members, join, fsm.Factory(h.db, h.wakeShard), cfg)
	if err != nil {
		h.mu.Lock()
		delete(h.shards, id)
		h.mu.Unlock()
		s.proposer.Close()
		return err
	}
	h.log.Info("shard replica started", zap.Uint64("shard_id", id), zap.Uint64("replica_id", uint64(r.ID)), zap.Bool("join", join))
	return nil
}

// wakeShard is the state machines' notifier: it runs on the apply goroutine.
func (h *Host) wakeShard(id uint64, c fsm.Change) {
	h.mu.RLock()
	s := h.shards[id]
	var d *dispatch.Dispatcher
	if s != nil {
		d = s.dispatcher
	}
	h.mu.RUnlock()
	if d != nil {
		d.Changed(c.Lows, c.ExpiryLow, c.Reset)
	}
}

// refreshLeaders re-reads leadership of every shard, in case an event was
// dropped.
func (h *Host) refreshLeaders(ctx context.Context) {
	h.mu.RLock()
	ids := make([]uint64, 0, len(h.shards))
	for id := range h.shards {
		ids = append(ids, id)
	}
	h.mu.RUnlock()
	for _, id := range ids {
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
		h.notifyChanged()
		return
	}
	h.mu.Lock()
	s, ok := h.shards[id]
	if !ok || s.leaderID == leader {
		h.mu.Unlock()
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
		s.dispatcher = dispatch.New(id, h.db, s.proposer.Propose, s.proposer.Start, h.readIndex(id, s.replicaID), h.cfg.Now, dc, h.log, h.dispM)
		s.dispatcher.Start() //nolint:contextcheck // dispatch.New gives each dispatcher its own context, cancelled by its Stop; it takes none from the host
		h.leaderG.WithLabelValues(fmt.Sprint(id)).Set(1)
		h.log.Info("shard leadership gained", zap.Uint64("shard_id", id))
	case leader != s.replicaID && s.dispatcher != nil:
		stopping = s.dispatcher
		s.dispatcher = nil
		h.leaderG.WithLabelValues(fmt.Sprint(id)).Set(0)
		h.log.Info("shard leadership lost", zap.Uint64("shard_id", id), zap.Uint64("leader_replica_id", leader))
	}
	h.mu.Unlock()
	if stopping != nil {
		stopping.Stop()
	}
	h.notifyChanged()
}

// ErrNoReplicaOnNode is answered to a leadership transfer to a node that
// holds no replica of the shard.
var ErrNoReplicaOnNode = errors.New("host: no replica of the shard on the node")

// NotShardLeaderError answers a leadership transfer asked of a node whose
// replica does not lead the shard: Leader and LeaderAddr (its gRPC
// address) name the node that does, 0 and empty when unknown.
type NotShardLeaderError struct {
	Shard      uint64
	Leader     uint64
	LeaderAddr string
}

func (e *NotShardLeaderError) Error() string {
	if e.Leader == 0 {
		return fmt.Sprintf("host: shard %d: leader unknown", e.Shard)
	}
	return fmt.Sprintf("host: shard %d led by node %d at %s", e.Shard, e.Leader, e.LeaderAddr)
}

// NotShardLeader marks the error for callers that match it by behaviour
// (errors.As with an interface, as the executor's RoutedHost does, which
// cannot import this package): always true.
func (e *NotShardLeaderError) NotShardLeader() bool { return true }

// TransferLeadership asks Dragonboat to move shard id's leadership to the
// replica on node toNode; it returns once the request is queued. Only the
// leader's own host starts a transfer, so the leader's dispatcher gives up
// its leader lease first and nothing is pushed ahead of a lease the
// transfer may drop. A follower asked answers a *NotShardLeaderError
// naming the leader: Dragonboat would forward the request to the leader,
// whose lease would then outlive its leadership while the target, elected
// at once, already answers cancels.
func (h *Host) TransferLeadership(id, toNode uint64) error {
	sh, ok := h.Meta().Shards[meta.EventShardID(id)]
	if !ok {
		return fmt.Errorf("%w: shard %d", ErrNoReplicaOnNode, id)
	}
	r, ok := sh.ReplicaOn(meta.NodeID(toNode))
	if !ok {
		return fmt.Errorf("%w: shard %d, node %d", ErrNoReplicaOnNode, id, toNode)
	}
	h.mu.RLock()
	var d *dispatch.Dispatcher
	var replica uint64
	if s := h.shards[id]; s != nil {
		d, replica = s.dispatcher, s.replicaID
	}
	h.mu.RUnlock()
	// The dispatcher says this host took the leadership; Dragonboat may
	// have seen it go since (the host loop drops the dispatcher next).
	if leader, _, valid, err := h.nh.GetLeaderID(id); d == nil || err != nil || !valid || leader != replica {
		e := &NotShardLeaderError{Shard: id}
		if err == nil && valid && leader != replica {
			e.Leader, e.LeaderAddr = h.nodeOfReplica(id, leader)
		}
		return e
	}
	d.EndLease()
	h.log.Info("shard leadership transfer requested", zap.Uint64("shard_id", id), zap.Uint64("to_node_id", toNode), zap.Uint64("to_replica_id", uint64(r.ID)))
	return h.nh.RequestLeaderTransfer(id, uint64(r.ID))
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
func (h *Host) readIndex(id, replicaID uint64) dispatch.ReadIndexFunc {
	return func(ctx context.Context) error {
		leader, term, valid, err := h.nh.GetLeaderID(id)
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
		rs, err := h.nh.ReadIndex(id, time.Until(deadline))
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
		if leader2, term2, valid2, err := h.nh.GetLeaderID(id); err != nil || !valid2 || leader2 != replicaID || term2 != term {
			return errNotLeading
		}
		return nil
	}
}

func (h *Host) notifyChanged() {
	h.mu.Lock()
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// Changed returns a channel closed at the next routing change.
func (h *Host) Changed() <-chan struct{} {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.changed
}

// Meta is the newest meta state this node has seen; never modify it.
func (h *Host) Meta() *meta.State { return h.metaState.Load() }

// DB exposes the state DB to the service layer (reads only).
func (h *Host) DB() *pebble.DB { return h.db }

// metaTimeout bounds meta proposals and reads whose context has no deadline
// (Dragonboat requires one).
const metaTimeout = 5 * time.Second

func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, metaTimeout)
}

// ProposeMeta commits a meta command and returns its result.
func (h *Host) ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	c.NowMs = h.cfg.Now().UnixMilli()
	res, err := h.nh.SyncPropose(ctx, h.nh.GetNoOPSession(meta.ShardID), c.Encode())
	if err != nil {
		return 0, nil, err
	}
	h.signalMeta()
	return res.Value, res.Data, nil
}

// ReadMeta answers the meta state after a linearizable read.
func (h *Host) ReadMeta(ctx context.Context) (*meta.State, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	v, err := h.nh.SyncRead(ctx, meta.ShardID, meta.Query{})
	if err != nil {
		return nil, err
	}
	return v.(*meta.State), nil
}

// Leading is the shard's proposer and dispatcher if this node leads it.
type Leading struct {
	Shard      uint64
	Proposer   *proposer.Proposer
	Dispatcher *dispatch.Dispatcher
}

// LeaderInfo says who leads a shard: this node (with its handles), another
// node, or nobody known. It answers ok=false if the shard is not hosted here.
func (h *Host) LeaderInfo(id uint64) (lead *Leading, leaderNode uint64, leaderAddr string, ok bool) {
	h.mu.RLock()
	s, hosted := h.shards[id]
	var leading *Leading
	if hosted && s.dispatcher != nil {
		leading = &Leading{Shard: id, Proposer: s.proposer, Dispatcher: s.dispatcher}
	}
	h.mu.RUnlock()
	if !hosted {
		return nil, 0, "", false
	}
	if leading != nil {
		return leading, h.cfg.NodeID, h.cfg.GRPCAddr, true
	}
	leader, _, valid, err := h.nh.GetLeaderID(id)
	if err != nil || !valid {
		return nil, 0, "", true
	}
	node, addr := h.nodeOfReplica(id, leader)
	return nil, node, addr, true
}

func (h *Host) nodeOfReplica(shardID, replicaID uint64) (uint64, string) {
	st := h.Meta()
	sh, ok := st.Shards[meta.EventShardID(shardID)]
	if !ok {
		return 0, ""
	}
	for _, r := range sh.Replicas {
		if uint64(r.ID) == replicaID {
			if n, ok := st.Nodes[r.Node]; ok {
				return uint64(n.ID), n.GRPCAddr
			}
		}
	}
	return 0, ""
}

// ShardLeaders maps every event shard to its leader's node id (0 unknown):
// hosted shards as this node sees them, the others as peers that host them
// last reported (SetPeerLeaders), so the routing table this broker serves
// names the leaders of shards it holds no replica of.
func (h *Host) ShardLeaders() map[uint64]uint64 {
	out := h.LocalShardLeaders()
	h.mu.RLock()
	defer h.mu.RUnlock()
	for id, leader := range h.peerLeaders {
		if _, hosted := out[id]; !hosted {
			out[id] = leader
		}
	}
	return out
}

// SetPeerLeaders records the leaders peers reported for shards this node
// may not host; a change of those the routing table shows notifies
// WatchRouting.
func (h *Host) SetPeerLeaders(leaders map[uint64]uint64) {
	h.mu.Lock()
	changed := false
	for id, leader := range leaders {
		if _, hosted := h.shards[id]; !hosted && h.peerLeaders[id] != leader {
			changed = true
		}
	}
	for id := range h.peerLeaders {
		if _, ok := leaders[id]; !ok {
			changed = true
		}
	}
	h.peerLeaders = leaders
	h.mu.Unlock()
	if changed {
		h.notifyChanged()
	}
}

// LocalShardLeaders maps each hosted shard to its leader's node id (0
// unknown).
func (h *Host) LocalShardLeaders() map[uint64]uint64 {
	h.mu.RLock()
	type pair struct{ id, leader uint64 }
	var ps []pair
	for id, s := range h.shards {
		ps = append(ps, pair{id, s.leaderID})
	}
	h.mu.RUnlock()
	out := make(map[uint64]uint64, len(ps))
	for _, p := range ps {
		node, _ := h.nodeOfReplica(p.id, p.leader)
		out[p.id] = node
	}
	return out
}

// MetaLeader is the node id leading the meta group, 0 if unknown.
func (h *Host) MetaLeader() uint64 {
	leader, _, valid, err := h.nh.GetLeaderID(meta.ShardID)
	if err != nil || !valid {
		return 0
	}
	return leader
}

// HostedShards lists the event shards with a replica here, ascending.
func (h *Host) HostedShards() []uint64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	ids := make([]uint64, 0, len(h.shards))
	for id := range h.shards {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

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
	t, ok := h.Meta().Topics[topic]
	if !ok {
		return dispatch.Policy{}
	}
	return dispatch.Policy{MaxAttempts: t.MaxAttempts, ReleaseRate: t.ReleaseRatePerSec, Partitions: t.Partitions, Fair: t.Kind == "fair", Weights: t.FairnessWeights}
}
