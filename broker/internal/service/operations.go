package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

const (
	// cancelWait bounds how long CancelOperation waits for the operation
	// to end once the cancel is recorded (the call's deadline may end it
	// sooner); the answer then says it still rolls back.
	cancelWait = 30 * time.Second
	// cancelPoll is how often it looks.
	cancelPoll = 200 * time.Millisecond
)

// cancelledBy is who a cancel is recorded as asked by (Operation.Cancel).
const cancelledBy = "by an operator (CancelOperation)"

// CancelOperation records the cancel of an operation in the meta group,
// which decides it in apply (meta cancelOperation: ordered with every step
// the executor records), then waits until the operation has ended, at most
// cancelWait or three quarters of the time the call has left. Any broker serves it: the cancel is a meta proposal and the
// rollback the executor's on the meta leader.
func (c *Cluster) CancelOperation(ctx context.Context, req *sundialv1.CancelOperationRequest) (*sundialv1.CancelOperationResponse, error) {
	if bad := validate.CancelOperation(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	id := meta.OperationID(req.GetOperationId())
	code, data, err := c.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpCancelOperation, OperationID: id, Error: cancelledBy})
	if err != nil {
		return nil, err
	}
	resp, err := cancelAnswer(id, code, data)
	if err != nil || resp.GetAlreadyFinished() {
		return resp, err
	}
	c.log.Info("operation cancel recorded", zap.Uint64("operation_id", uint64(id)), zap.String("status", resp.GetOperation().GetStatus()))
	wait := cancelWait
	if dl, ok := ctx.Deadline(); ok {
		// Answer before the caller's deadline, not at it: the answer
		// must still reach the caller.
		wait = min(wait, time.Until(dl)*3/4)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(cancelPoll)
	defer t.Stop()
	for resp.GetOperation().GetStatus() == string(meta.OperationRunning) {
		select {
		case <-wctx.Done():
			return resp, nil // still rolling back: the answer says so
		case <-t.C:
		}
		st, err := c.meta.ReadMeta(wctx)
		if err != nil {
			continue
		}
		if op := st.Operations[id]; op != nil {
			resp.Operation = operationProto(op)
		}
	}
	return resp, nil
}

// cancelAnswer turns the meta group's answer to cancel_operation into the
// RPC's: the operation as stored (already finished for ResultNoop),
// NotFound, or FailedPrecondition with meta's reason.
func cancelAnswer(id meta.OperationID, code uint64, data []byte) (*sundialv1.CancelOperationResponse, error) {
	switch code {
	case meta.ResultOK, meta.ResultNoop:
		var op meta.Operation
		if err := json.Unmarshal(data, &op); err != nil {
			return nil, status.Errorf(codes.Internal, "cancel operation %d: the meta group answered %q: %v", id, data, err)
		}
		return &sundialv1.CancelOperationResponse{Operation: operationProto(&op), AlreadyFinished: code == meta.ResultNoop}, nil
	case meta.ResultNotFound:
		return nil, status.Errorf(codes.NotFound, "operation %d does not exist (shardctl operations list shows them)", id)
	case meta.ResultCannotCancel:
		var why string
		if err := json.Unmarshal(data, &why); err != nil {
			why = fmt.Sprintf("operation %d cannot be cancelled now", id)
		}
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "operation_id", Description: why})
	}
	return nil, status.Errorf(codes.Internal, "cancel operation %d: the meta group answered result %d", id, code)
}
