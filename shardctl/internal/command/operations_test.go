package command

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// fakeCancel answers CancelOperation as a broker does for operations 1
// (pending: rolled back), 2 (ended before), 3 (at remove-replica:
// refused), 4 (rolling back past the call) and 5 (at delete-data: done,
// the step skipped); any other id is unknown.
type fakeCancel struct {
	sundialv1.UnimplementedClusterServer
}

func (fakeCancel) CancelOperation(_ context.Context, req *sundialv1.CancelOperationRequest) (*sundialv1.CancelOperationResponse, error) {
	if bad := validate.CancelOperation(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	steps := []*sundialv1.OperationStep{{Kind: "add-learner", NodeId: 4}, {Kind: "remove-replica", NodeId: 1}, {Kind: "delete-data", NodeId: 1}}
	op := &sundialv1.Operation{OperationId: req.GetOperationId(), Kind: "move-replica", ShardId: 100, FromNodeId: 1, ToNodeId: 4,
		Reason: "drain", Steps: steps, Cancel: "by an operator (CancelOperation)"}
	switch req.GetOperationId() {
	case 1:
		op.Status, op.Error = "rolled-back", "cancelled before it started: by an operator (CancelOperation)"
		return &sundialv1.CancelOperationResponse{Operation: op}, nil
	case 2:
		op.Status, op.Cancel, op.StartedAtMs, op.FinishedAtMs = "done", "", 1000, 4000
		return &sundialv1.CancelOperationResponse{Operation: op, AlreadyFinished: true}, nil
	case 3:
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "operation_id",
			Description: "operation 3 is at step remove-replica of node 1: the old replica is leaving the shard's membership, which cannot be undone"})
	case 4:
		op.Status, op.CurrentStep = "running", 0
		return &sundialv1.CancelOperationResponse{Operation: op}, nil
	case 5:
		op.Status, op.CurrentStep, op.StartedAtMs, op.FinishedAtMs = "done", 3, 1000, 9000
		steps[2].Outcome = "skipped: cancelled (by an operator (CancelOperation)); node 1 deletes the data of a replica no longer placed on it"
		return &sundialv1.CancelOperationResponse{Operation: op}, nil
	}
	return nil, status.Errorf(codes.NotFound, "operation %d does not exist (shardctl operations list shows them)", req.GetOperationId())
}

// operations cancel ID asks for --yes off a terminal, says how the
// operation ended (or that it still rolls back, or had ended already),
// says why a cancel was refused, and answers -o json for scripts.
func TestOperationsCancel(t *testing.T) {
	addr := serveCluster(t, fakeCancel{})
	for _, tc := range []cliCase{
		{name: "without --yes off a terminal", args: []string{"operations", "cancel", "1"}, wantCode: ExitUsage,
			wantStderr: "pass --yes to confirm"},
		{name: "no id", args: []string{"operations", "cancel", "--yes"}, wantCode: ExitUsage, wantStderr: "takes one argument, the operation ID"},
		{name: "not an id", args: []string{"operations", "cancel", "--yes", "x"}, wantCode: ExitUsage, wantStderr: "want an operation id"},
		{name: "pending", args: []string{"operations", "cancel", "--yes", "1"}, wantCode: ExitOK,
			wantOut: "operation 1 cancelled: rolled-back (cancelled before it started"},
		{name: "ended before", args: []string{"operations", "cancel", "--yes", "2"}, wantCode: ExitOK,
			wantOut: "operation 2 had already ended (done): nothing changed"},
		{name: "refused", args: []string{"operations", "cancel", "--yes", "3"}, wantCode: ExitFailure,
			wantStderr: "operations cancel 3: operation 3 is at step remove-replica of node 1: the old replica is leaving"},
		{name: "still rolling back", args: []string{"operations", "cancel", "--yes", "4"}, wantCode: ExitOK,
			wantOut: "operation 4 cancelled: still rolling back at 1/3 add-learner"},
		{name: "at delete-data", args: []string{"operations", "cancel", "--yes", "5"}, wantCode: ExitOK,
			wantOut: "the move is made (delete-data 1: skipped: cancelled"},
		{name: "unknown", args: []string{"operations", "cancel", "--yes", "9"}, wantCode: ExitFailure,
			wantStderr: "operation 9 does not exist"},
		{name: "json", args: []string{"operations", "cancel", "--yes", "-o", "json", "4"}, wantCode: ExitOK,
			wantOut: `"rolling_back": true`},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, addr) })
	}
}
