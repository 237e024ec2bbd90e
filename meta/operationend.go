package meta

import (
	"encoding/json"
	"fmt"
	"slices"
)

// How an operation that cannot go on ends. No step waits past its timeout
// without a recorded outcome:
//   - add-learner, wait-catch-up, promote and a transfer-leader of a move
//     roll back (remove-new) when they fail or time out, or at once when
//     the node they name is dead or removed: the operation ends
//     rolled-back with the reason in Error.
//   - a transfer-leader of a remove-replica or transfer-leader operation
//     (none) ends the operation failed.
//   - remove-replica (retry) is made by the shard's live replicas, never
//     by the node it removes; each failed attempt is recorded in the
//     operation's Error (note_step) and retried.
//   - delete-data is reported by the node that held the removed replica.
//     The replica is out of the membership and placement by then, so the
//     data is garbage on that node only: when the node is dead or removed,
//     or does not report within the step's timeout, the executor skips
//     the step (skip_step), recording why in Step.Outcome; the node's host
//     deletes the data of every replica no longer placed on it when it
//     next reads the meta state, at start-up included.
//   - an operator's cancel_operation ends the rest (cancelOperation).

// skipStep records step of operation id as skipped with outcome why and
// moves the operation on (advanceOperation). Only delete-data can be
// skipped, and only once the replica it deletes is out of the shard's
// placement: nothing but garbage on one node is left behind. A step other
// than the current one is a no-op (ResultNoop), so a retried proposal
// skips nothing twice; any other step is ResultInvalid.
func (s *State) skipStep(id OperationID, step int, why string, nowMs int64) uint64 {
	op := s.unfinished(id)
	if op == nil {
		return ResultNotFound
	}
	if step != op.Current || step >= len(op.Steps) {
		return ResultNoop
	}
	st := op.Steps[step]
	if st.Kind != StepDeleteData {
		return ResultInvalid
	}
	if sh := s.Shards[op.Shard]; sh != nil {
		if _, placed := sh.ReplicaOn(st.Node); placed {
			return ResultInvalid
		}
	}
	op.Steps[step].Outcome = why
	return s.advanceOperation(id, step, nowMs)
}

// noteStep records in Error why an attempt at step of operation id, the
// current one, failed while the executor retries it (the next step done
// clears it). A step other than the current one is a no-op (ResultNoop).
// It changes no placement, so the routing version stays.
func (s *State) noteStep(id OperationID, step int, why string) uint64 {
	op := s.unfinished(id)
	if op == nil {
		return ResultNotFound
	}
	if step != op.Current || op.Error == why {
		return ResultNoop
	}
	op.Error = why
	return ResultOK
}

// cancelOperation ends operation id at an operator's request (why says
// who asked; it is kept in Operation.Cancel), by the rollback of the step
// it is at:
//   - unknown id: ResultNotFound; an operation already finished:
//     ResultNoop, nothing changes.
//   - pending (no step ran), or at a step whose rollback is none: ends
//     rolled-back at once, with nothing to undo.
//   - at delete-data: the move is made, only its data deletion is left;
//     the step is skipped (see skipStep) and the operation ends done.
//   - at a remove-new step: Cancel is set and no step advances any more;
//     the executor removes the replica the operation added from the
//     shard's membership and ends it rolled-back. Refused when the new
//     replica may vote (the operation is at or past promote) and removing
//     it would leave fewer than a majority of the shard's replicas on
//     live nodes.
//   - at a retry step (remove-replica: the old replica is leaving the
//     membership, which cannot be undone) and every admin operation (they
//     roll forward): refused.
//
// Every answer but ResultNotFound carries the operation as stored (JSON);
// a refusal (ResultCannotCancel) carries the reason instead (a JSON
// string).
func (s *State) cancelOperation(id OperationID, why string, nowMs int64) (uint64, []byte) {
	op := s.Operations[id]
	if op == nil {
		return ResultNotFound, nil
	}
	if op.Finished() {
		b, _ := json.Marshal(op)
		return ResultNoop, b
	}
	if reason := s.uncancellable(op); reason != "" {
		b, _ := json.Marshal(reason)
		return ResultCannotCancel, b
	}
	step := op.Steps[op.Current]
	switch {
	case op.Status == OperationPending:
		op.Cancel = why
		s.finishOperation(id, OperationRolledBack, "cancelled before it started: "+why, nowMs)
	case step.Kind == StepDeleteData:
		s.skipStep(id, op.Current, fmt.Sprintf("skipped: cancelled (%s); node %d deletes the data of a replica no longer placed on it", why, step.Node), nowMs)
		op.Cancel = why
	case step.Rollback == RollbackNone:
		op.Cancel = why
		s.finishOperation(id, OperationRolledBack, fmt.Sprintf("cancelled at %s (nothing to undo): %s", step.Kind, why), nowMs)
	default: // remove-new: the executor removes the new replica
		op.Cancel = why
		s.Version++
	}
	b, _ := json.Marshal(op)
	return ResultOK, b
}

// uncancellable says why op cannot be cancelled now, empty when it can.
func (s *State) uncancellable(op *Operation) string {
	if op.Kind.Admin() {
		return fmt.Sprintf("operation %d is a %s: admin operations roll forward (every step is retried until it is done), they are not cancelled", op.ID, op.Kind)
	}
	if op.Status == OperationPending {
		return ""
	}
	step := op.Steps[op.Current]
	switch step.Rollback {
	case RollbackNone:
		return ""
	case RollbackRetry:
		if step.Kind == StepDeleteData {
			return ""
		}
		return fmt.Sprintf("operation %d is at step %s of node %d: the old replica is leaving the shard's membership, which cannot be undone; the executor retries the step until the shard's live replicas commit it", op.ID, step.Kind, step.Node)
	}
	promote := slices.IndexFunc(op.Steps, func(st Step) bool { return st.Kind == StepPromote })
	sh := s.Shards[op.Shard]
	if promote < 0 || op.Current < promote || sh == nil || op.NewReplica == 0 {
		return "" // the new replica is a learner at most: removing it changes no quorum
	}
	var left, live int
	for _, r := range sh.Replicas {
		if r.ID == op.NewReplica {
			continue
		}
		left++
		if s.live(r.Node) {
			live++
		}
	}
	if 2*live > left {
		return ""
	}
	return fmt.Sprintf("operation %d is at step %s: rolling back would remove replica %d (on node %d), which may vote, and leave %d of the shard's %d other replicas on live nodes, fewer than a majority; let the operation finish",
		op.ID, step.Kind, op.NewReplica, op.To, live, left)
}
