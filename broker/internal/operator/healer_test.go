package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/meta"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// cluster is 8 shards of 3 replicas on nodes 1-3, and nodes 4..n
// registered after the bootstrap (so they hold no replica); all active.
func cluster(n int) *meta.State {
	s := meta.NewState()
	for i := meta.NodeID(1); i <= 3; i++ {
		s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: i, GRPCAddr: "g"}})
	}
	s.Apply(&meta.Command{Op: meta.OpBootstrapShards, Count: 8, RF: 3, ClusterID: "c"})
	for i := meta.NodeID(4); i <= meta.NodeID(n); i++ {
		s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: i, GRPCAddr: "g"}})
	}
	return s
}

func TestLivenessDecisions(t *testing.T) {
	const timeout = 10 * time.Second
	tests := []struct {
		name   string
		nodes  int
		probes func(l *liveness) // what the leader saw since it began leading at t0
		at     time.Duration     // when decide runs, after t0
		dead   []meta.NodeID
		guard  bool
	}{
		{"all answering", 4, func(l *liveness) {
			for id := meta.NodeID(2); id <= 4; id++ {
				l.observe(id, true, t0.Add(11*time.Second))
			}
		}, 11 * time.Second, nil, false},
		{"unseen for less than the timeout", 4, func(l *liveness) {
			l.observe(2, true, t0.Add(2*time.Second))
			l.observe(2, false, t0.Add(3*time.Second))
			l.observe(3, true, t0.Add(11*time.Second))
			l.observe(4, true, t0.Add(11*time.Second))
		}, 11 * time.Second, nil, false},
		{"unseen for the timeout", 4, func(l *liveness) {
			l.observe(2, true, t0.Add(time.Second))
			l.observe(2, false, t0.Add(2*time.Second))
			l.observe(3, true, t0.Add(11*time.Second))
			l.observe(4, true, t0.Add(11*time.Second))
		}, 11 * time.Second, []meta.NodeID{2}, false},
		// A new leader counts every node as seen when it began leading, so
		// even a node that never answered it waits the whole timeout.
		{"fresh clocks: never answered, before the timeout", 4, func(l *liveness) {
			l.observe(2, false, t0)
		}, 9 * time.Second, nil, false},
		{"fresh clocks: never answered, at the timeout", 4, func(l *liveness) {
			l.observe(2, false, t0)
			l.observe(3, true, t0.Add(10*time.Second))
			l.observe(4, true, t0.Add(10*time.Second))
		}, 10 * time.Second, []meta.NodeID{2}, false},
		// A node that joined mid-term and does not answer yet (still
		// starting) has the whole timeout from its first probe.
		{"first probed mid-term", 4, func(l *liveness) {
			l.observe(2, false, t0.Add(5*time.Second))
			l.observe(3, true, t0.Add(11*time.Second))
			l.observe(4, true, t0.Add(11*time.Second))
		}, 11 * time.Second, nil, false},
		// 3 of 5 down: the leader is likely the one cut off.
		{"most of the cluster down", 5, func(l *liveness) {
			for id := meta.NodeID(2); id <= 4; id++ {
				l.observe(id, false, t0.Add(time.Second))
			}
			l.observe(5, true, t0.Add(11*time.Second))
		}, 11 * time.Second, nil, true},
		// 2 of 4 down is not more than half.
		{"half the cluster down", 4, func(l *liveness) {
			l.observe(2, false, t0.Add(time.Second))
			l.observe(3, false, t0.Add(time.Second))
			l.observe(4, true, t0.Add(11*time.Second))
		}, 11 * time.Second, []meta.NodeID{2, 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLiveness(timeout, t0)
			tt.probes(l)
			v := l.decide(cluster(tt.nodes), 1, t0.Add(tt.at))
			if !slices.Equal(v.Dead, tt.dead) || v.Guarded != tt.guard {
				t.Fatalf("decide() = dead %v, guarded %v; want dead %v, guarded %v", v.Dead, v.Guarded, tt.dead, tt.guard)
			}
		})
	}
}

// A dead node that answers again is to be declared alive; one that does
// not answer, or that no probe reached yet this term, is not. Removed
// nodes are neither weighed nor declared.
func TestLivenessRevivesADeadNodeThatAnswers(t *testing.T) {
	s := cluster(5)
	s.Apply(&meta.Command{Op: meta.OpDeclareDead, NodeID: 2})
	s.Apply(&meta.Command{Op: meta.OpDeclareDead, NodeID: 3})
	s.Nodes[5].State = meta.NodeRemoved
	l := newLiveness(time.Minute, t0)
	l.observe(2, true, t0.Add(time.Second))
	l.observe(4, true, t0.Add(time.Second))
	v := l.decide(s, 1, t0.Add(2*time.Second))
	if !slices.Equal(v.Alive, []meta.NodeID{2}) || len(v.Dead) != 0 || v.Total != 4 {
		t.Fatalf("decide() = %+v, want node 2 alive of 4 nodes weighed", v)
	}
}

// fakeHost is a meta state the healer reads and proposes to.
type fakeHost struct {
	mu     sync.Mutex
	st     *meta.State
	leader uint64
	// The meta group's membership, node id → Raft address, and the nodes
	// Promote made voters, in order.
	voters, nonVoting map[uint64]string
	promoted          []uint64
}

func (f *fakeHost) ReadMeta(context.Context) (*meta.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Clone(), nil
}

func (f *fakeHost) ProposeMeta(_ context.Context, c *meta.Command) (uint64, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := meta.DecodeCommand(c.Encode()) // as the state machine would see it
	if err != nil {
		return 0, nil, err
	}
	code, data := f.st.Apply(c)
	return code, data, nil
}

func (f *fakeHost) MetaLeader() uint64              { return f.leader }
func (f *fakeHost) ShardLeaders() map[uint64]uint64 { return nil }

func (f *fakeHost) MetaMembers(context.Context) (voters, nonVoting map[uint64]string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.voters), maps.Clone(f.nonVoting), nil
}

// Promote makes a non-voting member of the meta group a voter.
func (f *fakeHost) Promote(_ context.Context, shard, replica uint64, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if shard != meta.ShardID {
		return fmt.Errorf("promote on shard %d, want the meta group", shard)
	}
	delete(f.nonVoting, replica)
	f.voters[replica] = addr
	f.promoted = append(f.promoted, replica)
	return nil
}

// promotions are the nodes promoted to meta voter so far.
func (f *fakeHost) promotions() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.promoted)
}

// fakeProber answers for the nodes marked up.
type fakeProber struct {
	mu sync.Mutex
	up map[meta.NodeID]bool
}

func (p *fakeProber) Probe(_ context.Context, id meta.NodeID, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up[id] {
		return nil
	}
	return errors.New("no answer")
}

func (p *fakeProber) set(id meta.NodeID, up bool) {
	p.mu.Lock()
	p.up[id] = up
	p.mu.Unlock()
}

// healerRig is a healer on node 1 over a fake meta state (node 1 leads
// meta until the test changes fh.leader) and fake probes, on a clock that
// only round moves.
type healerRig struct {
	fh  *fakeHost
	fp  *fakeProber
	h   *Healer
	now time.Time
}

// newHealerRig starts st at t0 with the nodes in up answering; cfg.Now is
// the rig's clock.
func newHealerRig(t *testing.T, st *meta.State, up map[meta.NodeID]bool, cfg HealerConfig) *healerRig {
	r := &healerRig{fh: &fakeHost{st: st, leader: 1}, fp: &fakeProber{up: up}, now: t0}
	cfg.Now = func() time.Time { return r.now }
	r.h = NewHealer(r.fh, r.fp, nil, 1, cfg, zaptest.NewLogger(t), nil)
	return r
}

// withMetaVoters gives the rig's meta group the voters and non-voting
// members named (with the Raft address "r") and the healer the meta-voter
// policy over the rig's host and probes.
func (r *healerRig) withMetaVoters(t *testing.T, cfg HealerConfig, voters, nonVoting []uint64) *healerRig {
	r.fh.voters, r.fh.nonVoting = membershipOf(voters...), membershipOf(nonVoting...)
	cfg.Now = func() time.Time { return r.now }
	log := zaptest.NewLogger(t)
	r.h = NewHealer(r.fh, r.fp, NewMetaVoters(r.fh, r.fp, 1, log), 1, cfg, log, nil)
	return r
}

// round moves the clock on by d, runs one healer round and answers the
// meta state after it.
func (r *healerRig) round(d time.Duration) *meta.State {
	r.now = r.now.Add(d)
	r.h.tick(context.Background())
	st, _ := r.fh.ReadMeta(context.Background())
	return st
}

// rounds runs n rounds a second apart and answers the meta state after the
// last.
func (r *healerRig) rounds(n int) *meta.State {
	var st *meta.State
	for range n {
		st = r.round(time.Second)
	}
	return st
}

// The healer on the meta leader, driven round by round on an injected
// clock: node 2 stops answering; it is declared dead once the timeout has
// passed (not before), and repairs of its replicas onto node 4 are
// submitted, at most MaxRunning unfinished at once and only on shards no
// operation touches; when node 2 answers again it is declared alive. A
// broker that does not lead meta declares nothing.
func TestHealerDeclaresAndRepairs(t *testing.T) {
	r := newHealerRig(t, cluster(4), map[meta.NodeID]bool{2: true, 3: true, 4: true}, HealerConfig{DeadNodeTimeout: 10 * time.Second, MaxRunning: 3})
	fh, fp, round := r.fh, r.fp, r.round

	round(time.Second)
	fp.set(2, false)
	if st := round(9 * time.Second); st.Nodes[2].State != meta.NodeActive || len(st.Operations) != 0 {
		t.Fatalf("9s after node 2's last answer: state %q, %d operations; want active, none", st.Nodes[2].State, len(st.Operations))
	}
	st := round(time.Second)
	if st.Nodes[2].State != meta.NodeDead {
		t.Fatalf("10s after node 2's last answer: state %q, want dead", st.Nodes[2].State)
	}
	ops := st.Unfinished()
	if len(ops) != 3 {
		t.Fatalf("repairs submitted = %d, want MaxRunning (3)", len(ops))
	}
	for _, op := range ops {
		if op.Kind != meta.OpKindAddReplica || op.From != 2 || op.To != 4 {
			t.Fatalf("repair %v, want add-replica from 2 to 4", op)
		}
	}
	// Nothing more while those are unfinished.
	if st := round(time.Second); len(st.Operations) != 3 {
		t.Fatalf("operations with 3 unfinished = %d, want 3", len(st.Operations))
	}
	// Finish one: one more repair goes in, on another shard.
	fh.mu.Lock()
	done := fh.st.Operations[ops[0].ID]
	for i := range done.Steps {
		fh.st.Apply(&meta.Command{Op: meta.OpAdvanceOperation, OperationID: done.ID, Step: i})
	}
	fh.mu.Unlock()
	st = round(time.Second)
	if len(st.Operations) != 4 || len(st.Unfinished()) != 3 {
		t.Fatalf("after one repair ended: %d operations, %d unfinished; want 4, 3", len(st.Operations), len(st.Unfinished()))
	}
	shards := map[meta.EventShardID]bool{}
	for _, op := range st.Operations {
		if shards[op.Shard] {
			t.Fatalf("two repairs of shard %d", op.Shard)
		}
		shards[op.Shard] = true
	}

	fp.set(2, true)
	if st := round(time.Second); st.Nodes[2].State != meta.NodeActive {
		t.Fatalf("node 2 answering again: state %q, want active", st.Nodes[2].State)
	}

	// Not leading: nothing is declared, however long node 3 is silent.
	fh.leader = 2
	fp.set(3, false)
	if st := round(time.Minute); st.Nodes[3].State != meta.NodeActive {
		t.Fatalf("node 3 silent under another meta leader: state %q, want active", st.Nodes[3].State)
	}
	// Leading again: the clocks start over.
	fh.leader = 1
	if st := round(time.Second); st.Nodes[3].State != meta.NodeActive {
		t.Fatalf("node 3 right after this node leads again: state %q, want active", st.Nodes[3].State)
	}
	if st := round(10 * time.Second); st.Nodes[3].State != meta.NodeDead {
		t.Fatalf("node 3 silent for the timeout of this term: state %q, want dead", st.Nodes[3].State)
	}
}

// With most of the cluster silent the healer declares nothing.
func TestHealerMajorityGuard(t *testing.T) {
	r := newHealerRig(t, cluster(4), map[meta.NodeID]bool{2: false, 3: false, 4: false}, HealerConfig{DeadNodeTimeout: 10 * time.Second})
	st := r.rounds(30)
	for id := meta.NodeID(2); id <= 4; id++ {
		if st.Nodes[id].State != meta.NodeActive {
			t.Fatalf("node %d state %q with 3 of 4 nodes silent, want active", id, st.Nodes[id].State)
		}
	}
}

// A dead node whose shards have no live node to go to gets no repair; it
// is counted and tried again later.
func TestHealerWithoutRepairTarget(t *testing.T) {
	r := newHealerRig(t, cluster(3), map[meta.NodeID]bool{2: true, 3: false}, HealerConfig{DeadNodeTimeout: 10 * time.Second})
	st := r.rounds(12)
	if st.Nodes[3].State != meta.NodeDead || len(st.Operations) != 0 {
		t.Fatalf("node 3: state %q, %d operations; want dead, none (no live node without a replica)", st.Nodes[3].State, len(st.Operations))
	}
}

// Declaring a meta voter dead promotes a live non-voting member in its
// place (ReplaceDead). Node 4 is the only candidate; the round's TopUp
// alone would not promote it (one voter left live and one candidate make
// an even count short of 3), so its promotion is the dead voter's
// replacement.
func TestHealerReplacesADeadMetaVoter(t *testing.T) {
	st := cluster(4)
	st.Nodes[2].MetaVoter = true
	cfg := HealerConfig{DeadNodeTimeout: 10 * time.Second}
	r := newHealerRig(t, st, map[meta.NodeID]bool{4: true}, cfg).withMetaVoters(t, cfg, []uint64{1, 2, 3}, []uint64{4})
	got := r.rounds(15)
	if got.Nodes[2].State != meta.NodeDead || got.Nodes[3].State != meta.NodeDead {
		t.Fatalf("nodes 2, 3: %q, %q; want both dead", got.Nodes[2].State, got.Nodes[3].State)
	}
	if p := r.fh.promotions(); !slices.Equal(p, []uint64{4}) || !got.Nodes[4].MetaVoter {
		t.Fatalf("promoted %v, node 4 recorded meta voter %v; want [4], true", p, got.Nodes[4].MetaVoter)
	}
}

// A node unseen for SuspectAfter (but not the dead timeout) is suspect:
// Suspects names it, and a repair of a dead node's replicas goes to an
// answering node, not to it. It stops being suspect once it answers, and
// a broker that does not lead meta names none.
func TestHealerSuspectsGetNoRepairs(t *testing.T) {
	r := newHealerRig(t, cluster(5), map[meta.NodeID]bool{2: true, 3: true, 4: true, 5: true},
		HealerConfig{DeadNodeTimeout: 10 * time.Second, SuspectAfter: 3 * time.Second, MaxRunning: 8})
	fh, fp, h, round := r.fh, r.fp, r.h, r.round
	round(time.Second)
	fp.set(2, false)
	round(5 * time.Second)
	if got := h.Suspects(); len(got) != 1 || !got[2] {
		t.Fatalf("Suspects() 5s after node 2's last answer = %v, want node 2", got)
	}
	fp.set(4, false) // node 4 stops answering 5s before node 2 is declared dead
	round(2 * time.Second)
	if got := h.Suspects(); len(got) != 1 || !got[2] {
		t.Fatalf("Suspects() 2s after node 4's last answer = %v, want node 2 only", got)
	}
	st := round(3 * time.Second)
	if st.Nodes[2].State != meta.NodeDead || st.Nodes[4].State != meta.NodeActive {
		t.Fatalf("nodes 2, 4: %q, %q; want dead, active", st.Nodes[2].State, st.Nodes[4].State)
	}
	if got := h.Suspects(); len(got) != 1 || !got[4] {
		t.Fatalf("Suspects() with node 2 dead, node 4 unseen for 5s = %v, want node 4 only", got)
	}
	ops := st.Unfinished()
	if len(ops) == 0 {
		t.Fatal("no repairs of node 2's replicas submitted")
	}
	for _, op := range ops {
		if op.From != 2 || op.To != 5 {
			t.Fatalf("repair %v, want add-replica from dead node 2 to node 5 (node 4 is suspect)", op)
		}
	}
	fp.set(4, true)
	round(time.Second)
	if got := h.Suspects(); len(got) != 0 {
		t.Fatalf("Suspects() after node 4 answered = %v, want none", got)
	}
	fh.leader = 2
	fp.set(3, false)
	round(time.Minute)
	if got := h.Suspects(); got != nil {
		t.Fatalf("Suspects() while not leading meta = %v, want nil", got)
	}
}

// The meta voters are topped up once a round on the meta leader, after
// the round's probes (a suspect node that answers again is promoted in
// that round), and never on a broker that does not lead meta.
func TestHealerTopsUpMetaVotersEachRound(t *testing.T) {
	cfg := HealerConfig{DeadNodeTimeout: time.Minute}
	r := newHealerRig(t, cluster(3), map[meta.NodeID]bool{2: true}, cfg).withMetaVoters(t, cfg, []uint64{1}, []uint64{2, 3})
	r.fh.mu.Lock()
	r.fh.leader = 2
	r.fh.mu.Unlock()
	r.fp.set(3, true)
	r.round(0)
	if p := r.fh.promotions(); len(p) != 0 {
		t.Fatalf("a round not leading meta promoted %v, want none", p)
	}
	r.fh.mu.Lock()
	r.fh.leader = 1
	r.fh.mu.Unlock()
	r.fp.set(3, false)
	r.rounds(5)
	if p, s := r.fh.promotions(), r.h.Suspects(); len(p) != 0 || !s[3] {
		t.Fatalf("node 3 down for 5 rounds: promoted %v, suspects %v; want none (1 voter and 1 candidate stay 1 voter), node 3 suspect", p, s)
	}
	r.fp.set(3, true)
	st := r.round(time.Second)
	if p := r.fh.promotions(); !slices.Equal(p, []uint64{2, 3}) || !st.Nodes[2].MetaVoter || !st.Nodes[3].MetaVoter {
		t.Fatalf("node 3 answers again: promoted %v, want [2 3] recorded as meta voters", p)
	}
}

// Liveness tells what the meta leader knows of each node before any is
// declared dead: node 2 stops answering and shows unreachable at the next
// round with its last answer's time, suspect after SuspectAfter, still
// active; answering nodes (and the leader itself) show the round's time.
// A broker that does not lead meta knows nothing.
func TestHealerLiveness(t *testing.T) {
	fh := &fakeHost{st: cluster(3), leader: 1}
	fp := &fakeProber{up: map[meta.NodeID]bool{2: true, 3: true}}
	now := t0
	h := NewHealer(fh, fp, nil, 1, HealerConfig{DeadNodeTimeout: time.Minute, SuspectAfter: 3 * time.Second,
		Now: func() time.Time { return now }}, zaptest.NewLogger(t), nil)
	round := func(d time.Duration) map[meta.NodeID]NodeLiveness {
		now = now.Add(d)
		h.tick(context.Background())
		return h.Liveness()
	}
	if got := h.Liveness(); got != nil {
		t.Fatalf("Liveness() before a round = %v, want nil", got)
	}
	answered := t0.Add(time.Second)
	round(time.Second)
	fp.set(2, false)
	steps := []struct {
		after time.Duration
		two   NodeLiveness
	}{
		{time.Second, NodeLiveness{LastSeen: answered, Unreachable: true}},
		{2 * time.Second, NodeLiveness{LastSeen: answered, Unreachable: true, Suspect: true}},
	}
	for _, s := range steps {
		got := round(s.after)
		want := map[meta.NodeID]NodeLiveness{1: {LastSeen: now}, 2: s.two, 3: {LastSeen: now}}
		if !maps.Equal(got, want) {
			t.Fatalf("Liveness() %v after node 2's last answer = %v, want %v", now.Sub(answered), got, want)
		}
		if st, _ := fh.ReadMeta(context.Background()); st.Nodes[2].State != meta.NodeActive {
			t.Fatalf("node 2 state %q, want active (not dead yet)", st.Nodes[2].State)
		}
	}
	fp.set(2, true)
	if got := round(time.Second); got[2] != (NodeLiveness{LastSeen: now}) {
		t.Fatalf("Liveness()[2] once it answers again = %+v, want seen now", got[2])
	}
	fh.mu.Lock()
	fh.leader = 2
	fh.mu.Unlock()
	if got := round(time.Second); got != nil {
		t.Fatalf("Liveness() while not leading meta = %v, want nil", got)
	}
}

// A node removed with force while it still held replicas (remove-node
// --force of a dead or unreachable broker) has its replicas repaired like
// a dead node's: before, only a manual rebalance re-created them.
func TestHealerRepairsAForceRemovedNode(t *testing.T) {
	st := cluster(4)
	if code, _ := st.Apply(&meta.Command{Op: meta.OpSetNodeState, NodeID: 3, NodeState: meta.NodeRemoved, Force: true}); code != meta.ResultOK {
		t.Fatalf("force-remove node 3 = %d, want OK", code)
	}
	r := newHealerRig(t, st, map[meta.NodeID]bool{2: true, 4: true}, HealerConfig{DeadNodeTimeout: time.Minute, MaxRunning: 8})
	got := r.round(time.Second)
	ops := got.Unfinished()
	if len(ops) != 8 {
		t.Fatalf("repairs after node 3's forced removal = %d, want one per shard it held (8)", len(ops))
	}
	for _, op := range ops {
		if op.Kind != meta.OpKindAddReplica || op.From != 3 || op.To != 4 {
			t.Fatalf("repair %v, want add-replica from removed node 3 to node 4", op)
		}
	}
}
