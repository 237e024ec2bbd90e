package operator

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/meta/rebalance"
)

// Healing. On the broker leading the meta group the Healer probes every
// registered, non-removed node each HealerConfig.Interval (package-level
// Prober: Peer.Identify over gRPC), declares a node dead (meta command
// declare_dead) once it has not answered for DeadNodeTimeout, and declares
// it alive again (declare_alive) once it answers; its host then drops the
// replicas that were re-created elsewhere meanwhile. The clocks start
// fresh whenever this node begins leading (see liveness), and nothing is
// declared dead while more than half of the nodes look down.
//
// While a dead node, or one removed with force (remove-node --force of a
// dead or unreachable broker), holds replicas it plans with the rebalance
// planner and submits only the repairs (add a replica on a live node, then
// remove the one on the gone node), at most MaxRunning operations unfinished at once, on shards no
// operation touches; the Executor runs them. A shard whose repair found no
// live node to go to is logged and counted, and planned again next round.
//
// A node unseen for SuspectAfter (a few probe rounds), not yet declared
// dead, is suspect: Suspects names it, and every plan made on the meta
// leader (these repairs, Rebalance, DrainNode) leaves it alone as
// rebalance.Options.Unavailable: no replica or leadership moves onto it,
// where the move would wait for it to catch up and roll back, nor off it.
// Liveness answers, for operators (GetClusterInfo), when each node last
// answered, whether the latest probe got an answer and whether it is
// suspect: a node that stopped shows so within a round or two, long before
// it is declared dead.
//
// Each round ends with the meta-voter policy's TopUp (metavoters.go),
// which keeps three live meta voters as the cluster grows by joins, and a
// meta voter declared dead is replaced through its ReplaceDead.

// HealerHost is what the healer needs of the broker's host.
type HealerHost interface {
	ReadMeta(ctx context.Context) (*meta.State, error)
	ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error)
	// MetaLeader is the node leading the meta group, 0 if unknown.
	MetaLeader() uint64
	// ShardLeaders maps event shards to the node of their leader (0 or
	// missing: unknown).
	ShardLeaders() map[uint64]uint64
}

// Prober asks node id at its gRPC address whether it is alive; nil error
// means it answered as that node.
type Prober interface {
	Probe(ctx context.Context, id meta.NodeID, grpcAddr string) error
}

// HealerConfig tunes the healer.
type HealerConfig struct {
	// DeadNodeTimeout is how long a node may go unseen before it is
	// declared dead. Required (> 0).
	DeadNodeTimeout time.Duration
	// SuspectAfter is how long a node may go unseen before plans stop
	// choosing it as a target (Suspects). Default 3 × Interval (the
	// broker passes suspect_node_timeout).
	SuspectAfter time.Duration
	// Interval between probe rounds. Default 1s.
	Interval time.Duration
	// ProbeTimeout bounds one probe. Default 1s.
	ProbeTimeout time.Duration
	// MaxRunning caps the unfinished operations the healer lets stand
	// when it submits repairs (the executor's cap). Default 4.
	MaxRunning int
	// RetryInterval is how long a shard's repair is not submitted again
	// after one was (a repair that failed or rolled back is planned again
	// after it). Default 10s.
	RetryInterval time.Duration
	// Timeouts bound the steps of the repairs; zero fields take
	// meta.DefaultStepTimeouts.
	Timeouts meta.StepTimeouts
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c HealerConfig) withDefaults() HealerConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = time.Second
	}
	if c.SuspectAfter <= 0 {
		c.SuspectAfter = 3 * c.Interval
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = 4
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 10 * time.Second
	}
	if c.Timeouts.Step <= 0 || c.Timeouts.CatchUp <= 0 {
		c.Timeouts = meta.DefaultStepTimeouts()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Healer declares nodes dead or alive and repairs the replicas of dead
// ones while this node leads meta.
type Healer struct {
	host  HealerHost
	probe Prober
	// voters is the meta-voter policy the healer runs on the meta leader;
	// nil: the voters stay as they are.
	voters *MetaVoters
	self   meta.NodeID
	cfg    HealerConfig
	log    *zap.Logger
	m      *healerMetrics

	// Owned by the loop goroutine.
	live     *liveness                       // nil while not leading meta
	guarded  bool                            // the majority guard held last round
	repaired map[meta.EventShardID]time.Time // when a repair of the shard was last submitted

	mu    sync.Mutex                   // guards nodes
	nodes map[meta.NodeID]NodeLiveness // as of the last round; nil while not leading meta

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Suspects names the nodes this healer has not heard from for
// SuspectAfter, as of its last round, not declared dead; nil while this
// broker does not lead meta (it probes nothing then). Safe from any
// goroutine; the map is the caller's.
func (h *Healer) Suspects() map[meta.NodeID]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nodes == nil {
		return nil
	}
	set := map[meta.NodeID]bool{}
	for id, l := range h.nodes {
		if l.Suspect {
			set[id] = true
		}
	}
	return set
}

// Liveness is what this healer knows of every registered node but the
// removed ones, as of its last round; nil while this broker does not lead
// meta. Safe from any goroutine; the map is the caller's.
func (h *Healer) Liveness() map[meta.NodeID]NodeLiveness {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nodes == nil {
		return nil
	}
	return maps.Clone(h.nodes)
}

// publish makes nodes the answer of Liveness and Suspects.
func (h *Healer) publish(nodes map[meta.NodeID]NodeLiveness) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes = nodes
}

// NewHealer returns the healer of node self; Start runs it. voters, when
// not nil, is called on the healer's goroutine: TopUp at the end of every
// round on the meta leader, once the round's suspects are known, and
// ReplaceDead once the healer has declared dead a node that votes in the
// meta group. With nil the voters stay as they are (a dead voter stays a
// member and the meta group runs on the others).
func NewHealer(h HealerHost, p Prober, voters *MetaVoters, self uint64, cfg HealerConfig, log *zap.Logger, reg prometheus.Registerer) *Healer {
	return &Healer{host: h, probe: p, voters: voters, self: meta.NodeID(self), cfg: cfg.withDefaults(), log: log.Named("healer"),
		m: newHealerMetrics(reg), repaired: map[meta.EventShardID]time.Time{}}
}

// Start runs the healer's loop until Stop.
func (h *Healer) Start(ctx context.Context) {
	ctx, h.cancel = context.WithCancel(ctx)
	h.wg.Add(1)
	go h.loop(ctx)
}

// Stop ends the loop and waits for it.
func (h *Healer) Stop() {
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
}

func (h *Healer) loop(ctx context.Context) {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.tick(ctx)
	}
}

// tick runs one round: probe, declare, repair, then the meta voters.
func (h *Healer) tick(ctx context.Context) {
	if meta.NodeID(h.host.MetaLeader()) != h.self {
		if h.live != nil {
			h.live, h.guarded = nil, false
			h.repaired = map[meta.EventShardID]time.Time{}
			h.publish(nil)
			h.m.reset()
		}
		return
	}
	if h.live == nil {
		h.live = newLiveness(h.cfg.DeadNodeTimeout, h.cfg.Now())
		h.log.Info("leading meta: node liveness clocks started", zap.Duration("dead_node_timeout", h.cfg.DeadNodeTimeout))
	}
	st, err := h.host.ReadMeta(ctx)
	if err != nil {
		return
	}
	h.probeAll(ctx, st)
	now := h.cfg.Now()
	v := h.live.decide(st, h.self, now)
	h.m.observe(st, h.live, h.self, now)
	h.declare(ctx, st, v, now)
	if len(v.Dead) > 0 || len(v.Alive) > 0 {
		if st, err = h.host.ReadMeta(ctx); err != nil {
			return
		}
	}
	suspects := h.noteSuspects(h.live.suspects(st, h.self, h.cfg.SuspectAfter, now), now)
	h.publish(h.live.view(st, h.self, suspects, now))
	h.repair(ctx, st, suspects, now)
	if h.voters != nil {
		h.voters.TopUp(ctx, h.Suspects())
	}
}

// probeAll probes every registered, non-removed node but this one at once
// and records the outcomes.
func (h *Healer) probeAll(ctx context.Context, st *meta.State) {
	type outcome struct {
		id    meta.NodeID
		alive bool
	}
	var wg sync.WaitGroup
	results := make(chan outcome, len(st.Nodes))
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if id == h.self || n.State == meta.NodeRemoved {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, h.cfg.ProbeTimeout)
			defer cancel()
			err := h.probe.Probe(pctx, id, n.GRPCAddr)
			results <- outcome{id, err == nil}
		})
	}
	wg.Wait()
	close(results)
	if ctx.Err() != nil {
		return // stopping: a cancelled probe is no sign of death
	}
	now := h.cfg.Now()
	for r := range results {
		h.live.observe(r.id, r.alive, now)
	}
}

// declare proposes the verdict's declarations and logs them.
func (h *Healer) declare(ctx context.Context, st *meta.State, v verdict, now time.Time) {
	if v.Guarded && !h.guarded {
		h.log.Warn("nodes unseen past dead_node_timeout but most of the cluster looks down: declaring none dead (this node may be cut off)",
			zap.Int("down_nodes", v.Down), zap.Int("nodes", v.Total))
	}
	h.guarded = v.Guarded
	for _, id := range v.Dead {
		code, _, err := h.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpDeclareDead, NodeID: id})
		if err != nil {
			h.log.Warn("declare node dead: proposal not committed", zap.Uint64("node_id", uint64(id)), zap.Error(err))
			continue
		}
		if code == meta.ResultOK {
			last := h.live.lastSeen(id)
			h.m.declared.WithLabelValues("dead").Inc()
			h.log.Warn("node declared dead", zap.Uint64("node_id", uint64(id)), zap.Time("last_seen", last),
				zap.Duration("unseen_for", now.Sub(last)), zap.Duration("dead_node_timeout", h.cfg.DeadNodeTimeout),
				zap.Bool("meta_voter", st.Nodes[id].MetaVoter))
			if st.Nodes[id].MetaVoter && h.voters != nil {
				h.voters.ReplaceDead(ctx, id)
			}
		}
	}
	for _, id := range v.Alive {
		code, _, err := h.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpDeclareAlive, NodeID: id})
		if err != nil {
			h.log.Warn("declare node alive: proposal not committed", zap.Uint64("node_id", uint64(id)), zap.Error(err))
			continue
		}
		if code == meta.ResultOK {
			h.m.declared.WithLabelValues("alive").Inc()
			h.log.Info("node back: declared alive", zap.Uint64("node_id", uint64(id)))
		}
	}
}

// repair submits repairs of the replicas on dead and removed nodes, none
// onto the suspect nodes.
func (h *Healer) repair(ctx context.Context, st *meta.State, suspects map[meta.NodeID]bool, now time.Time) {
	// The shards with a replica on a dead or removed node, and whether an
	// operation touches them already.
	need := map[meta.EventShardID]bool{}
	dead := 0
	for _, sid := range st.ShardIDs() {
		for _, r := range st.Shards[sid].Replicas {
			if gone(st, r.Node) {
				need[sid] = true
				dead++
			}
		}
	}
	h.m.deadReplicas.Set(float64(dead))
	if len(need) == 0 {
		return
	}
	unfinished := st.Unfinished()
	for _, op := range unfinished {
		delete(need, op.Shard)
	}
	for sid := range need {
		if t, ok := h.repaired[sid]; ok && now.Sub(t) < h.cfg.RetryInterval {
			delete(need, sid)
		}
	}
	room := h.cfg.MaxRunning - len(unfinished)
	if len(need) == 0 || room <= 0 {
		return
	}
	leaders := map[meta.EventShardID]meta.NodeID{}
	for id, n := range h.host.ShardLeaders() {
		if n != 0 {
			leaders[meta.EventShardID(id)] = meta.NodeID(n)
		}
	}
	// Plan everything the planner would (it puts repairs first), keep the
	// repairs of dead replicas.
	var ops []meta.Operation
	for _, op := range rebalance.Plan(st, leaders, rebalance.Options{MaxOperations: len(st.Shards) + 1, Timeouts: h.cfg.Timeouts, Unavailable: suspects}) {
		if op.Reason != rebalance.ReasonRepair || !need[op.Shard] || !gone(st, op.From) {
			continue
		}
		if len(ops) < room {
			ops = append(ops, op)
		}
		delete(need, op.Shard)
	}
	for _, sid := range sortedShards(need) {
		// Planned nothing: no live node without a replica of the shard.
		h.m.noTarget.Inc()
		h.repaired[sid] = now
		h.log.Warn("repair: no live node can take a replica of the shard; retried later",
			zap.Uint64("shard_id", uint64(sid)), zap.Duration("retry_in", h.cfg.RetryInterval), SuspectsField(suspects))
	}
	if len(ops) == 0 {
		return
	}
	code, data, err := h.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpSubmitOperations, Operations: ops})
	if err != nil {
		h.log.Warn("repair: submit not committed", zap.Error(err))
		return
	}
	var ids []meta.OperationID
	if code == meta.ResultOK {
		_ = json.Unmarshal(data, &ids) // the state machine's own encoding of a list of ids
	}
	for _, op := range ops {
		h.repaired[op.Shard] = now
		h.log.Info("repair planned", zap.Uint64("shard_id", uint64(op.Shard)), zap.Uint64("dead_node_id", uint64(op.From)),
			zap.Uint64("to_node_id", uint64(op.To)), zap.Stringer("operation", op))
	}
	h.m.repairs.Add(float64(len(ids)))
	h.log.Info("repairs submitted", zap.Int("planned", len(ops)), zap.Any("operation_ids", ids), SuspectsField(suspects))
}

// gone says node id is dead or removed: its replicas are to be repaired.
func gone(st *meta.State, id meta.NodeID) bool {
	n := st.Nodes[id]
	return n != nil && (n.State == meta.NodeDead || n.State == meta.NodeRemoved)
}

// noteSuspects logs the nodes that became or stopped being suspect since
// the last round, sets the gauge and returns this round's as a set.
func (h *Healer) noteSuspects(ids []meta.NodeID, now time.Time) map[meta.NodeID]bool {
	before, set := h.Suspects(), map[meta.NodeID]bool{}
	for _, id := range ids {
		set[id] = true
		if !before[id] {
			last := h.live.lastSeen(id)
			h.log.Warn("node suspect: not heard from lately; plans move nothing onto or off it until it answers or is declared dead",
				zap.Uint64("node_id", uint64(id)), zap.Time("last_seen", last), zap.Duration("unseen_for", now.Sub(last)),
				zap.Duration("suspect_after", h.cfg.SuspectAfter))
		}
	}
	for id := range before {
		if !set[id] {
			h.log.Info("node no longer suspect", zap.Uint64("node_id", uint64(id)))
		}
	}
	h.m.suspects.Set(float64(len(ids)))
	return set
}

// SuspectsField is the log field of a plan that skipped suspect nodes as
// targets: suspect_nodes, their ids in order; zap.Skip when there are none.
func SuspectsField(suspects map[meta.NodeID]bool) zap.Field {
	if len(suspects) == 0 {
		return zap.Skip()
	}
	ids := slices.Sorted(maps.Keys(suspects))
	return zap.Any("suspect_nodes", ids)
}

func sortedShards(set map[meta.EventShardID]bool) []meta.EventShardID {
	out := make([]meta.EventShardID, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
