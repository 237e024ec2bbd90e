package operator

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/meta"
)

// How the executor ends what cannot go on (the rules are meta's, see
// meta/operationend.go): a step that names a dead or removed node, a
// delete-data step nobody reports, an operation an operator cancelled.

// errNodeGone fails a step whose node is dead or removed: it follows its
// rollback rule at once instead of waiting for its timeout.
var errNodeGone = errors.New("operator: the step's node is gone")

// cleanUp is how a skipped delete-data's data goes, as its outcome says.
const cleanUp = "its host deletes the data of replicas no longer placed on it when it next reads the meta state (at start-up included)"

// nodeGone says "dead" or "removed" for a node in that state, "" else
// (an unregistered node is left to the step, which refuses it).
func nodeGone(st *meta.State, id meta.NodeID) string {
	n := st.Nodes[id]
	if n == nil {
		return ""
	}
	switch n.State {
	case meta.NodeDead:
		return "dead"
	case meta.NodeRemoved:
		return "removed"
	}
	return ""
}

// skip records op's current step (a delete-data) skipped with outcome why.
func (e *Executor) skip(ctx context.Context, op *meta.Operation, why string) error {
	code, _, err := e.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpSkipStep, OperationID: op.ID, Step: op.Current, Error: why})
	if err != nil {
		return err
	}
	if code == meta.ResultOK {
		e.log.Warn("operation step skipped", zap.Uint64("shard_id", uint64(op.Shard)), zap.Uint64("operation_id", uint64(op.ID)),
			zap.String("step", string(op.Steps[op.Current].Kind)), zap.String("outcome", why))
	}
	return nil
}

// cancelled rolls back op, which an operator cancelled at a remove-new
// step (meta ends the other cancels itself): the replica it added leaves
// the membership and the operation ends rolled back.
func (e *Executor) cancelled(ctx context.Context, st *meta.State, op *meta.Operation) {
	if op.Steps[op.Current].Rollback != meta.RollbackRemoveNew {
		// Not one meta leaves to the executor: nothing to undo.
		if err := e.finish(ctx, op.ID, meta.OperationRolledBack, fmt.Sprintf("cancelled at %s: %s", op.Steps[op.Current].Kind, op.Cancel)); err != nil {
			sleep(ctx, e.cfg.Poll)
		}
		return
	}
	if err := e.rollBack(ctx, st, op, fmt.Errorf("cancelled: %s", op.Cancel)); err != nil {
		e.log.Warn("cancelled operation: roll back not done yet", zap.Uint64("operation_id", uint64(op.ID)), zap.Error(err))
		sleep(ctx, e.cfg.Poll)
	}
}
