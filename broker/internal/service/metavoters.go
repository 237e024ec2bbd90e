package service

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/meta"
)

// metaVoterTarget is how many live voters the meta group keeps when it
// can: three survive the loss of any one host.
const metaVoterTarget = 3

// metaVotersTimeout bounds one MetaVoters call, so a meta group that does
// not answer holds the healer's round up no longer.
const metaVotersTimeout = 30 * time.Second

// MetaVoters promotes non-voting members of the meta group to voters
// while fewer than three of its voters are live, as metaVoterPromotions
// decides, so a cluster that grew from one broker by joins survives the
// loss of any one meta host. Each promotion is logged (`meta voter
// promoted`, reason "fewer than 3 voters") and recorded (set_meta_voter).
// The healer calls it each round on the meta leader.
func (c *Cluster) MetaVoters(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, metaVotersTimeout)
	defer cancel()
	st, err := c.host.ReadMeta(ctx)
	if err != nil {
		c.log.Warn("meta voters: read meta", zap.Error(err))
		return
	}
	voters, nonVoting, err := c.host.MetaMembers(ctx)
	if err != nil {
		c.log.Warn("meta voters: read meta membership", zap.Error(err))
		return
	}
	live := func(n *meta.Node) bool { return c.live(ctx, n) }
	for _, cand := range metaVoterPromotions(st, voters, nonVoting, c.unavailable(), live) {
		if err := c.host.Promote(ctx, meta.ShardID, cand, nonVoting[cand]); err != nil {
			c.log.Warn("meta voters: promote", zap.Uint64("node_id", cand), zap.Error(fmt.Errorf("promote node %d to meta voter: %w", cand, err)))
			return
		}
		if _, _, err := c.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpSetMetaVoter, NodeID: meta.NodeID(cand), MetaVoter: true}); err != nil {
			c.log.Warn("meta voters: record the promotion", zap.Uint64("node_id", cand), zap.Error(err))
			return
		}
		c.log.Info("meta voter promoted", zap.Uint64("node_id", cand), zap.String("reason", "fewer than 3 voters"))
	}
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
	for _, id := range sortedKeys(nonVoting) {
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
