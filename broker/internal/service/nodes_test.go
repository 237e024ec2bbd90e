package service

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
)

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

// remove-node --force on a node that answers is refused; the refusal says
// what to run instead: a drained node needs only remove-node without
// --force, any other node a drain first.
func TestForceRefusalNamesTheNextCommand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state meta.NodeState
		want  string
	}{
		{"active", meta.NodeActive, "run shardctl drain-node 2, then shardctl remove-node 2"},
		{"drained", meta.NodeDraining, "node 2 is drained: run shardctl remove-node 2 without --force"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &meta.Node{ID: 2, State: tc.state, GRPCAddr: "127.0.0.1:7502"}
			st := &meta.State{Nodes: map[meta.NodeID]*meta.Node{2: n}}
			err := forceLiveRefusal(st, n)
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("forceLiveRefusal(%s node) = %v, want FailedPrecondition containing %q", tc.name, err, tc.want)
			}
		})
	}
}

// remove-node of an active node says to drain it first, and names --force
// for a broker that is down for good (one whose disk died cannot drain).
func TestNotDrainedNamesForceForADeadBroker(t *testing.T) {
	err := notDrainedError(5, meta.NodeActive)
	msg := status.Convert(err).Message()
	for _, want := range []string{"run shardctl drain-node 5 first", "shardctl remove-node --force 5"} {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, want) {
			t.Errorf("notDrainedError(5, active) = %v, want FailedPrecondition containing %q", err, want)
		}
	}
}
