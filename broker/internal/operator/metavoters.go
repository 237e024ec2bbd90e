package operator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
)

// Meta voters. The meta group keeps three live voters when it can: the
// Healer tops it up each round on the meta leader (TopUp) and replaces a
// voter it declares dead (ReplaceDead), and node removal replaces a voter
// that leaves (Replace, called by the Cluster service's RemoveNode). Which
// node gets the vote is decided here, by metaVoterPromotions and
// voterReplacement; a node counts as live when it is this broker or
// answers as itself (Live, through the broker's one PeerProber).

// metaVoterTarget is how many live voters the meta group keeps when it
// can: three survive the loss of any one host.
const metaVoterTarget = 3

// metaVotersTimeout bounds one TopUp, so a meta group that does not
// answer holds the healer's round up no longer.
const metaVotersTimeout = 30 * time.Second

// liveTimeout bounds the probe that tells a live node from an unreachable
// one.
const liveTimeout = 2 * time.Second

// VoterHost is what the meta-voter policy needs of the broker's host.
type VoterHost interface {
	ReadMeta(ctx context.Context) (*meta.State, error)
	ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error)
	// MetaMembers is the meta group's membership, node id → Raft address.
	MetaMembers(ctx context.Context) (voters, nonVoting map[uint64]string, err error)
	// Promote makes replica a voter of shard (here the meta group).
	Promote(ctx context.Context, shard, replica uint64, raftAddr string) error
}

// MetaVoters is the meta-voter policy of node self: which member of the
// meta group gets a vote when a voter dies or leaves, or while fewer than
// three voters are live. Safe for concurrent use.
type MetaVoters struct {
	host  VoterHost
	probe Prober
	self  uint64
	log   *zap.Logger
}

// NewMetaVoters returns the policy of node self over h; probe tells
// whether another node answers as itself.
func NewMetaVoters(h VoterHost, probe Prober, self uint64, log *zap.Logger) *MetaVoters {
	return &MetaVoters{host: h, probe: probe, self: self, log: log.Named("operator")}
}

// Live says n is this broker or answers as itself within liveTimeout.
func (v *MetaVoters) Live(ctx context.Context, n *meta.Node) bool {
	if uint64(n.ID) == v.self {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, liveTimeout)
	defer cancel()
	return v.probe.Probe(ctx, n.ID, n.GRPCAddr) == nil
}

// Replace keeps the meta group safe when voter id leaves it (voters and
// nonVoting are its membership), as voterReplacement decides: it promotes
// the non-voting member chosen and records it as a meta voter, answering
// its id (0: nobody promoted). A refusal is a FailedPrecondition status.
func (v *MetaVoters) Replace(ctx context.Context, st *meta.State, id meta.NodeID, voters, nonVoting map[uint64]string, force bool) (uint64, error) {
	live := func(n *meta.Node) bool { return v.Live(ctx, n) }
	cand, err := voterReplacement(st, id, voters, nonVoting, live, force)
	if err != nil || cand == 0 {
		return 0, err
	}
	if err := v.host.Promote(ctx, meta.ShardID, cand, nonVoting[cand]); err != nil {
		return 0, fmt.Errorf("promote node %d to meta voter: %w", cand, err)
	}
	if _, _, err := v.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpSetMetaVoter, NodeID: meta.NodeID(cand), MetaVoter: true}); err != nil {
		return 0, err
	}
	v.log.Info("meta voter promoted", zap.Uint64("node_id", cand), zap.Uint64("replaces_node_id", uint64(id)))
	return cand, nil
}

// ReplaceDead promotes an active, answering non-voting member of the meta
// group to voter in place of id, a meta voter the healer declared dead,
// so the meta group keeps three live voters. The dead voter stays a
// member until it is removed (shardctl remove-node --force), which takes
// it out of the meta group. With nobody to promote it logs and does
// nothing: the group runs on its live voters. The healer calls it on the
// meta leader.
func (v *MetaVoters) ReplaceDead(ctx context.Context, id meta.NodeID) {
	log := v.log.With(zap.Uint64("dead_node_id", uint64(id)))
	st, err := v.host.ReadMeta(ctx)
	if err != nil {
		log.Warn("replace dead meta voter: read meta", zap.Error(err))
		return
	}
	voters, nonVoting, err := v.host.MetaMembers(ctx)
	if err != nil {
		log.Warn("replace dead meta voter: read meta membership", zap.Error(err))
		return
	}
	promoted, err := v.Replace(ctx, st, id, voters, nonVoting, true)
	switch {
	case err != nil:
		log.Warn("replace dead meta voter", zap.Error(err))
	case promoted == 0:
		log.Warn("dead meta voter not replaced: no active non-voting member answers; join a broker, then remove the dead one")
	}
}

// TopUp promotes non-voting members of the meta group to voters while
// fewer than three of its voters are live, as metaVoterPromotions decides
// (never a suspect node), so a cluster that grew from one broker by joins
// survives the loss of any one meta host. Each promotion is logged (`meta
// voter promoted`, reason "fewer than 3 voters") and recorded
// (set_meta_voter). The healer calls it each round on the meta leader.
func (v *MetaVoters) TopUp(ctx context.Context, suspects map[meta.NodeID]bool) {
	ctx, cancel := context.WithTimeout(ctx, metaVotersTimeout)
	defer cancel()
	st, err := v.host.ReadMeta(ctx)
	if err != nil {
		v.log.Warn("meta voters: read meta", zap.Error(err))
		return
	}
	voters, nonVoting, err := v.host.MetaMembers(ctx)
	if err != nil {
		v.log.Warn("meta voters: read meta membership", zap.Error(err))
		return
	}
	live := func(n *meta.Node) bool { return v.Live(ctx, n) }
	for _, cand := range metaVoterPromotions(st, voters, nonVoting, suspects, live) {
		if err := v.host.Promote(ctx, meta.ShardID, cand, nonVoting[cand]); err != nil {
			v.log.Warn("meta voters: promote", zap.Uint64("node_id", cand), zap.Error(fmt.Errorf("promote node %d to meta voter: %w", cand, err)))
			return
		}
		if _, _, err := v.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpSetMetaVoter, NodeID: meta.NodeID(cand), MetaVoter: true}); err != nil {
			v.log.Warn("meta voters: record the promotion", zap.Uint64("node_id", cand), zap.Error(err))
			return
		}
		v.log.Info("meta voter promoted", zap.Uint64("node_id", cand), zap.String("reason", "fewer than 3 voters"))
	}
}

// voterReplacement decides how voter id leaves the meta group (voters
// and nonVoting are its membership, node id → Raft address): it answers
// the non-voting member to promote in its place, the lowest id that is
// active and live. With nobody to promote it answers 0, or refuses a
// removal that leaves fewer than 3 voters unless force, and always one
// that leaves fewer live voters than a quorum of the voters left. It is
// pure but for live.
func voterReplacement(st *meta.State, id meta.NodeID, voters, nonVoting map[uint64]string, live func(*meta.Node) bool, force bool) (uint64, error) {
	for _, cand := range slices.Sorted(maps.Keys(nonVoting)) {
		if n := st.Nodes[meta.NodeID(cand)]; n != nil && n.State == meta.NodeActive && live(n) {
			return cand, nil
		}
	}
	left, alive := 0, 0
	for _, v := range slices.Sorted(maps.Keys(voters)) {
		if v == uint64(id) {
			continue
		}
		left++
		if n := st.Nodes[meta.NodeID(v)]; n != nil && n.State != meta.NodeDead && live(n) {
			alive++
		}
	}
	if left < 3 && !force {
		return 0, apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id", Description: fmt.Sprintf(
			"node %d is a meta voter: removing it would leave %d meta voters and no active non-voting member answers to replace it; "+
				"join another broker first (shardctl add-node, or sundial-broker --join), then remove node %d", id, left, id)})
	}
	if alive < left/2+1 {
		return 0, apierr.FailedPrecondition(apierr.FieldViolation{Field: "node_id", Description: fmt.Sprintf(
			"removing meta voter %d would leave %d meta voters of which only %d answer, fewer than a quorum (%d): bring a voter back first",
			id, left, alive, left/2+1)})
	}
	return 0, nil
}

// metaVoterPromotions decides which non-voting members of the meta group
// (voters and nonVoting are its membership, node id → Raft address) to
// promote so that it has metaVoterTarget live voters: a voter is live
// when it is registered and neither dead nor removed (a suspect voter
// still counts: it may answer again soon, and a promotion is never undone;
// once declared dead it no longer does); a candidate when it is active,
// not suspect and live (asked only while voters are missing). It
// answers the lowest ids first, as many as are missing, but never a count
// that leaves the group with an even number of voters short of the
// target: 1 voter and one candidate stay 1 voter, since 2 voters survive
// no loss either and need both hosts up. It is pure but for live.
func metaVoterPromotions(st *meta.State, voters, nonVoting map[uint64]string, suspect map[meta.NodeID]bool, live func(*meta.Node) bool) []uint64 {
	alive := 0
	for id := range voters {
		if n := st.Nodes[meta.NodeID(id)]; n != nil && n.State != meta.NodeDead && n.State != meta.NodeRemoved {
			alive++
		}
	}
	missing := metaVoterTarget - alive
	if missing <= 0 {
		return nil
	}
	var cands []uint64
	for _, id := range slices.Sorted(maps.Keys(nonVoting)) {
		if len(cands) == missing {
			break
		}
		if n := st.Nodes[meta.NodeID(id)]; n != nil && n.State == meta.NodeActive && !suspect[n.ID] && live(n) {
			cands = append(cands, id)
		}
	}
	if len(cands) > 0 && len(cands) < missing && (len(voters)+len(cands))%2 == 0 {
		cands = cands[:len(cands)-1]
	}
	if len(cands) == 0 {
		return nil
	}
	return cands
}
