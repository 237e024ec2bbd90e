package service

import (
	"slices"
	"testing"

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
