package service

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
)

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
