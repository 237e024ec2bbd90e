package meta

import (
	"fmt"
	"strings"
	"time"
)

// OperationID names a persisted operation. Zero means "not persisted yet":
// the planner returns operations without ids and the meta state machine
// assigns ids from its own counter when it stores them, so ids are never
// reused.
type OperationID uint64

// OperationKind says what an operation changes.
type OperationKind string

// Operation kinds.
const (
	// OpKindMoveReplica moves one replica of Shard from node From to node To.
	OpKindMoveReplica OperationKind = "move-replica"
	// OpKindAddReplica adds a replica of Shard on To (repair). From, when
	// set, names a dead node whose replica is removed once the new replica
	// votes; its data is not deleted since the node is gone.
	OpKindAddReplica OperationKind = "add-replica"
	// OpKindRemoveReplica removes the replica of Shard on From (a shard
	// above its replication factor).
	OpKindRemoveReplica OperationKind = "remove-replica"
	// OpKindTransferLeader moves Shard's leadership from From to To.
	OpKindTransferLeader OperationKind = "transfer-leader"
)

// StepKind is one membership or leadership action of an operation.
type StepKind string

// Step kinds, in the order a move runs them.
const (
	// StepAddLearner adds a new replica on Node as a non-voting learner.
	// The replica id is the operation's NewReplica.
	StepAddLearner StepKind = "add-learner"
	// StepWaitCatchUp waits until the learner on Node has applied the
	// leader's commit index (or installed a snapshot at it).
	StepWaitCatchUp StepKind = "wait-catch-up"
	// StepPromote turns the learner on Node into a voter.
	StepPromote StepKind = "promote"
	// StepTransferLeader moves leadership to Node. Present only when the
	// node the operation removes leads the shard at planning time; the
	// executor skips it when that node no longer leads.
	StepTransferLeader StepKind = "transfer-leader"
	// StepRemoveReplica removes the replica on Node from the shard's
	// membership.
	StepRemoveReplica StepKind = "remove-replica"
	// StepDeleteData deletes the removed replica's data on Node.
	StepDeleteData StepKind = "delete-data"
)

// Rollback says what the executor does when a step fails or times out
// after its retries.
type Rollback string

// Rollback rules.
const (
	// RollbackRemoveNew undoes the operation: the replica it added (if
	// any) is removed and its data deleted, leaving the shard as it was.
	// Used by every step before the old replica leaves the membership.
	RollbackRemoveNew Rollback = "remove-new"
	// RollbackRetry rolls forward: the step is retried until it succeeds.
	// Used once the old replica is leaving, when going back is no longer
	// safe and going on always is.
	RollbackRetry Rollback = "retry"
	// RollbackNone abandons the operation with nothing to undo (a failed
	// leadership transfer leaves the leader where it was).
	RollbackNone Rollback = "none"
)

// Step is one action of an operation.
type Step struct {
	Kind StepKind `json:"kind"`
	Node NodeID   `json:"node"`
	// Shard names the shard an admin step changes (adminop.go); zero for
	// the steps of replica and leadership operations, whose shard is the
	// operation's.
	Shard EventShardID `json:"shard,omitempty"`
	// Group names the group a register-group step of a seed-groups
	// operation registers; empty for every other step (a create-group's
	// steps register the operation's Group).
	Group string `json:"group,omitempty"`
	// TimeoutMs bounds one attempt of the step, in milliseconds.
	TimeoutMs int64    `json:"timeout_ms"`
	Rollback  Rollback `json:"rollback"`
	// Outcome says how a step that did not simply complete ended: empty
	// for a step done (or not reached), "skipped: ..." with the reason for
	// a step the executor or a cancel skipped (operationend.go).
	Outcome string `json:"outcome,omitempty"`
}

// OperationStatus is an operation's place in its life cycle.
type OperationStatus string

// Operation statuses. The planner returns pending operations; the
// executor moves them on.
const (
	OperationPending    OperationStatus = "pending"
	OperationRunning    OperationStatus = "running"
	OperationDone       OperationStatus = "done"
	OperationFailed     OperationStatus = "failed"
	OperationRolledBack OperationStatus = "rolled-back"
)

// Operation is one change of a shard's replicas or leadership, run step by
// step by the executor on the meta leader and persisted in the meta state
// so a new meta leader resumes it.
//
// Contract: an operation is a pure value. The planner builds it from a
// cluster view alone (same view, same operations) and never names ids it
// cannot know: ID and NewReplica are zero in a plan and assigned by the meta
// state machine when it persists the operation (NewReplica from
// NextReplicaID, so replica ids are never reused). At most one operation
// touches a shard at a time.
type Operation struct {
	ID     OperationID   `json:"id,omitempty"`
	Kind   OperationKind `json:"kind"`
	Shard  EventShardID  `json:"shard"`
	From   NodeID        `json:"from,omitempty"`
	To     NodeID        `json:"to,omitempty"`
	Reason string        `json:"reason"`
	// Topic and Group name what an admin operation (adminop.go) changes;
	// empty for replica and leadership operations, whose Shard is zero.
	Topic string `json:"topic,omitempty"`
	Group string `json:"group,omitempty"`
	// NewReplica is the id of the replica added on To; zero until the
	// operation is persisted.
	NewReplica ReplicaID `json:"new_replica,omitempty"`
	Steps      []Step    `json:"steps"`
	// Status and Current (the index of the step running or next to run)
	// are kept by the executor.
	Status  OperationStatus `json:"status"`
	Current int             `json:"current"`
	// Error says why a failed or rolled-back operation stopped; while a
	// step that rolls forward (retry) is retried, why its last attempt
	// failed (note_step, operationend.go).
	Error string `json:"error,omitempty"`
	// Cancel, when set, says who asked for the operation to be cancelled
	// (cancel_operation, operationend.go). Once set no step advances; the
	// executor rolls the operation back. It stays set after the end.
	Cancel string `json:"cancel,omitempty"`
	// CreatedAtMs, StartedAtMs and FinishedAtMs are stamped by the meta
	// state machine from the proposer's clock (zero until they happen).
	CreatedAtMs  int64 `json:"created_at_ms,omitempty"`
	StartedAtMs  int64 `json:"started_at_ms,omitempty"`
	FinishedAtMs int64 `json:"finished_at_ms,omitempty"`
}

// Finished says the operation is done, failed or rolled back: it no
// longer holds its shard.
func (o Operation) Finished() bool {
	switch o.Status {
	case OperationDone, OperationFailed, OperationRolledBack:
		return true
	}
	return false
}

// StepTimeouts bound the steps of the operations the planner builds.
type StepTimeouts struct {
	// Step bounds one attempt of every step but the catch-up.
	Step time.Duration
	// CatchUp bounds the wait for a learner to catch up (it may install a
	// snapshot of the whole shard).
	CatchUp time.Duration
}

// DefaultStepTimeouts are 30s per step and 10m for a catch-up.
func DefaultStepTimeouts() StepTimeouts {
	return StepTimeouts{Step: 30 * time.Second, CatchUp: 10 * time.Minute}
}

// NewMoveReplica moves shard's replica from one node to another: add a
// learner on to, wait for it, promote it, hand leadership to leaderTo when
// from leads (leaderTo zero: from does not lead), remove the replica on
// from, delete its data.
func NewMoveReplica(shard EventShardID, from, to, leaderTo NodeID, reason string, t StepTimeouts) Operation {
	steps := joinSteps(to, t)
	if leaderTo != 0 {
		steps = append(steps, t.step(StepTransferLeader, leaderTo, t.Step, RollbackRemoveNew))
	}
	steps = append(steps,
		t.step(StepRemoveReplica, from, t.Step, RollbackRetry),
		t.step(StepDeleteData, from, t.Step, RollbackRetry))
	return Operation{Kind: OpKindMoveReplica, Shard: shard, From: from, To: to, Reason: reason,
		Steps: steps, Status: OperationPending}
}

// NewAddReplica adds a replica of shard on to and then, when dead is not
// zero, removes the replica on the dead node (whose data cannot be deleted).
func NewAddReplica(shard EventShardID, to, dead NodeID, reason string, t StepTimeouts) Operation {
	steps := joinSteps(to, t)
	if dead != 0 {
		steps = append(steps, t.step(StepRemoveReplica, dead, t.Step, RollbackRetry))
	}
	return Operation{Kind: OpKindAddReplica, Shard: shard, From: dead, To: to, Reason: reason,
		Steps: steps, Status: OperationPending}
}

// NewRemoveReplica removes shard's replica on from, handing leadership to
// leaderTo first when from leads (leaderTo zero: it does not), and deletes
// the replica's data unless from is dead.
func NewRemoveReplica(shard EventShardID, from, leaderTo NodeID, fromDead bool, reason string, t StepTimeouts) Operation {
	var steps []Step
	if leaderTo != 0 {
		steps = append(steps, t.step(StepTransferLeader, leaderTo, t.Step, RollbackNone))
	}
	steps = append(steps, t.step(StepRemoveReplica, from, t.Step, RollbackRetry))
	if !fromDead {
		steps = append(steps, t.step(StepDeleteData, from, t.Step, RollbackRetry))
	}
	return Operation{Kind: OpKindRemoveReplica, Shard: shard, From: from, Reason: reason,
		Steps: steps, Status: OperationPending}
}

// NewTransferLeader moves shard's leadership from one replica's node to
// another's.
func NewTransferLeader(shard EventShardID, from, to NodeID, reason string, t StepTimeouts) Operation {
	return Operation{Kind: OpKindTransferLeader, Shard: shard, From: from, To: to, Reason: reason,
		Steps: []Step{t.step(StepTransferLeader, to, t.Step, RollbackNone)}, Status: OperationPending}
}

func joinSteps(to NodeID, t StepTimeouts) []Step {
	return []Step{
		t.step(StepAddLearner, to, t.Step, RollbackRemoveNew),
		t.step(StepWaitCatchUp, to, t.CatchUp, RollbackRemoveNew),
		t.step(StepPromote, to, t.Step, RollbackRemoveNew),
	}
}

func (StepTimeouts) step(k StepKind, n NodeID, timeout time.Duration, rb Rollback) Step {
	return Step{Kind: k, Node: n, TimeoutMs: timeout.Milliseconds(), Rollback: rb}
}

// String is the operation on one line, as `shardctl rebalance --dry-run`
// prints it: kind, shard, nodes, reason, then the steps.
func (o Operation) String() string {
	if o.Kind.Admin() {
		return o.adminString()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s shard=%d", o.Kind, o.Shard)
	if o.From != 0 {
		fmt.Fprintf(&b, " from=%d", o.From)
	}
	if o.To != 0 {
		fmt.Fprintf(&b, " to=%d", o.To)
	}
	fmt.Fprintf(&b, " (%s):", o.Reason)
	for i, s := range o.Steps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s %d", s.Kind, s.Node)
	}
	return b.String()
}
