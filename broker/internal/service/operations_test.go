package service

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
)

// The meta group's answers to cancel_operation, from the real state
// machine, become the RPC's: the operation (already_finished for one that
// had ended), NotFound, FailedPrecondition with meta's reason.
func TestCancelAnswer(t *testing.T) {
	s := meta.NewState()
	for id := meta.NodeID(1); id <= 4; id++ {
		s.Apply(&meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: id, GRPCAddr: "g"}})
	}
	s.Apply(&meta.Command{Op: meta.OpBootstrapShards, Count: 1, RF: 3, ClusterID: "c"})
	shard := s.ShardIDs()[0]
	from := s.Shards[shard].Replicas[0].Node
	s.Apply(&meta.Command{Op: meta.OpSubmitOperations, Operations: []meta.Operation{meta.NewMoveReplica(shard, from, 4, 0, "t", meta.DefaultStepTimeouts())}})
	cancel := func() (uint64, []byte) {
		return s.Apply(&meta.Command{Op: meta.OpCancelOperation, OperationID: 1, Error: cancelledBy})
	}

	code, data := cancel()
	resp, err := cancelAnswer(1, code, data)
	if err != nil || resp.GetAlreadyFinished() || resp.GetOperation().GetStatus() != string(meta.OperationRolledBack) || resp.GetOperation().GetCancel() != cancelledBy {
		t.Fatalf("cancel of a pending operation = %v, %v; want it rolled back, cancel %q", resp, err, cancelledBy)
	}
	code, data = cancel()
	if resp, err := cancelAnswer(1, code, data); err != nil || !resp.GetAlreadyFinished() {
		t.Fatalf("cancel again = %v, %v; want already_finished", resp, err)
	}
	if _, err := cancelAnswer(2, meta.ResultNotFound, nil); status.Code(err) != codes.NotFound {
		t.Fatalf("cancel of an unknown operation: %v, want NotFound", err)
	}
	why, _ := json.Marshal("the old replica is leaving")
	if _, err := cancelAnswer(1, meta.ResultCannotCancel, why); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "the old replica is leaving") {
		t.Fatalf("refused cancel: %v, want FailedPrecondition with meta's reason", err)
	}
}
