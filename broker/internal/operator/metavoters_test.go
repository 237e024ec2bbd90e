package operator

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
)

// metaVoterPromotions tops the meta group up to 3 live (not dead) voters
// with the lowest active, answering, unsuspected non-voting members, and
// never stops short at an even number of voters.
func TestMetaVoterPromotions(t *testing.T) {
	cases := []struct {
		name      string
		voters    []uint64
		nonVoting []uint64
		down      []uint64 // nodes that do not answer
		suspect   []uint64
		dead      []uint64
		removed   []uint64
		draining  []uint64
		want      []uint64
	}{
		{name: "1 voter, 2 joined: both in one round", voters: []uint64{1}, nonVoting: []uint64{2, 3}, want: []uint64{2, 3}},
		{name: "1 voter, 3 joined: the lowest two", voters: []uint64{1}, nonVoting: []uint64{2, 3, 4}, want: []uint64{2, 3}},
		{name: "1 voter, 1 joined: 2 voters would survive no loss either", voters: []uint64{1}, nonVoting: []uint64{2}},
		{name: "2 voters, 1 joined", voters: []uint64{1, 2}, nonVoting: []uint64{3, 4}, want: []uint64{3}},
		{name: "3 voters: nothing", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4, 5}},
		{name: "a dead voter is not live", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4}, dead: []uint64{3}, want: []uint64{4}},
		{name: "a suspect voter still counts", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4}, suspect: []uint64{2}},
		{name: "a removed voter is not live", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4}, removed: []uint64{2}, want: []uint64{4}},
		{name: "2 live of 4 voters, 1 joined", voters: []uint64{1, 2, 3, 4}, nonVoting: []uint64{5}, dead: []uint64{3, 4}, want: []uint64{5}},
		{name: "skip the down, suspect and draining", voters: []uint64{1}, nonVoting: []uint64{2, 3, 4, 5, 6}, down: []uint64{2}, suspect: []uint64{3}, draining: []uint64{4}, want: []uint64{5, 6}},
		{name: "1 voter, 2 joined, one down: stay at 1", voters: []uint64{1}, nonVoting: []uint64{2, 3}, down: []uint64{3}},
		{name: "1 voter, nobody joined", voters: []uint64{1}},
		{name: "2 voters, nobody joined", voters: []uint64{1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := sixNodeState(tc.draining)
			for _, id := range tc.dead {
				st.Nodes[meta.NodeID(id)].State = meta.NodeDead
			}
			for _, id := range tc.removed {
				st.Nodes[meta.NodeID(id)].State = meta.NodeRemoved
			}
			suspect := map[meta.NodeID]bool{}
			for _, id := range tc.suspect {
				suspect[meta.NodeID(id)] = true
			}
			got := metaVoterPromotions(st, membershipOf(tc.voters...), membershipOf(tc.nonVoting...), suspect, answeringBut(tc.down))
			if !slices.Equal(got, tc.want) {
				t.Errorf("metaVoterPromotions(voters %v, non-voting %v) = %v, want %v", tc.voters, tc.nonVoting, got, tc.want)
			}
		})
	}
}

// voterReplacement promotes the lowest live active non-voting member,
// refuses to shrink the meta group below 3 voters with nobody to promote
// unless forced, and never leaves fewer live voters than a quorum.
func TestVoterReplacement(t *testing.T) {
	cases := []struct {
		name      string
		voters    []uint64
		nonVoting []uint64
		down      []uint64 // nodes that do not answer
		draining  []uint64
		force     bool
		want      uint64
		refused   string // part of the refusal, "" when allowed
	}{
		{name: "promote the joined broker", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4}, want: 4},
		{name: "lowest live active first", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4, 5, 6}, down: []uint64{4}, draining: []uint64{5}, want: 6},
		{name: "nobody to promote, 3 voters", voters: []uint64{1, 2, 3}, refused: "would leave 2 meta voters"},
		{name: "nobody live to promote", voters: []uint64{1, 2, 3}, nonVoting: []uint64{4}, down: []uint64{4}, refused: "join another broker first"},
		{name: "forced, the 2 left are live", voters: []uint64{1, 2, 3}, down: []uint64{1}, force: true},
		{name: "forced, only 1 of 2 left live", voters: []uint64{1, 2, 3}, down: []uint64{1, 2}, force: true, refused: "fewer than a quorum"},
		{name: "5 voters shrink to 4", voters: []uint64{1, 2, 3, 4, 5}},
		{name: "5 voters, 2 of the 4 left down", voters: []uint64{1, 2, 3, 4, 5}, down: []uint64{2, 3}, refused: "only 2 answer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := sixNodeState(tc.draining)
			got, err := voterReplacement(st, 1, membershipOf(tc.voters...), membershipOf(tc.nonVoting...), answeringBut(tc.down), tc.force)
			switch {
			case tc.refused == "" && (err != nil || got != tc.want):
				t.Fatalf("voterReplacement() = %d, %v; want %d, nil", got, err, tc.want)
			case tc.refused != "" && (status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("voterReplacement() = %d, %v; want FailedPrecondition mentioning %q", got, err, tc.refused)
			}
		})
	}
}

// membershipOf is a meta group membership (voting or not) of the replicas on
// nodes ids, as Dragonboat lists one: replica id to address.
func membershipOf(ids ...uint64) map[uint64]string {
	m := map[uint64]string{}
	for _, id := range ids {
		m[id] = "r"
	}
	return m
}

// sixNodeState is a meta state of nodes 1-6, active but for those in draining.
func sixNodeState(draining []uint64) *meta.State {
	st := meta.NewState()
	for id := meta.NodeID(1); id <= 6; id++ {
		st.Nodes[id] = &meta.Node{ID: id, State: meta.NodeActive}
	}
	for _, id := range draining {
		st.Nodes[meta.NodeID(id)].State = meta.NodeDraining
	}
	return st
}

// answeringBut is a probe under which every node answers but those in down.
func answeringBut(down []uint64) func(*meta.Node) bool {
	return func(n *meta.Node) bool { return !slices.Contains(down, uint64(n.ID)) }
}
