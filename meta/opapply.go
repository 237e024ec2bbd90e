package meta

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
)

// Clone is a deep copy.
func (o *Operation) Clone() *Operation {
	c := *o
	c.Steps = slices.Clone(o.Steps)
	return &c
}

// OperationIDs returns the ids of all operations in ascending order.
func (s *State) OperationIDs() []OperationID { return slices.Sorted(maps.Keys(s.Operations)) }

// Unfinished returns copies of the pending and running operations in id
// order: the ones an executor runs and a planner must plan around.
func (s *State) Unfinished() []Operation {
	var ops []Operation
	for _, id := range s.OperationIDs() {
		if op := s.Operations[id]; !op.Finished() {
			ops = append(ops, *op.Clone())
		}
	}
	return ops
}

// busy reports whether an unfinished operation touches shard.
func (s *State) busy(shard EventShardID) bool {
	for _, op := range s.Operations {
		if op.Shard == shard && !op.Finished() {
			return true
		}
	}
	return false
}

// submitOperations stores the operations that still fit the state, each
// with the next operation id and, when it adds a replica, the next replica
// id. An operation is skipped when its shard is gone or already has an
// unfinished operation, or when its nodes no longer fit the shard's
// replicas; so a retried proposal that commits twice stores nothing the
// second time. The result's data is the JSON list of the stored ids;
// ResultNoop when none was stored.
func (s *State) submitOperations(ops []Operation, nowMs int64) (uint64, []byte) {
	var stored []OperationID
	for _, op := range ops {
		if !s.fits(&op) {
			continue
		}
		if s.NextOperationID == 0 {
			s.NextOperationID = 1
		}
		o := op.Clone()
		o.ID = s.NextOperationID
		s.NextOperationID++
		o.NewReplica = 0
		if slices.ContainsFunc(o.Steps, func(st Step) bool { return st.Kind == StepAddLearner }) {
			o.NewReplica = s.NextReplicaID
			s.NextReplicaID++
		}
		o.Status, o.Current, o.Error = OperationPending, 0, ""
		o.CreatedAtMs, o.StartedAtMs, o.FinishedAtMs = nowMs, 0, 0
		if s.Operations == nil {
			s.Operations = map[OperationID]*Operation{}
		}
		s.Operations[o.ID] = o
		stored = append(stored, o.ID)
	}
	if len(stored) == 0 {
		return ResultNoop, nil
	}
	s.Version++
	b, _ := json.Marshal(stored)
	return ResultOK, b
}

// fits reports whether op can run on the state as it is.
func (s *State) fits(op *Operation) bool {
	sh, ok := s.Shards[op.Shard]
	if !ok || len(op.Steps) == 0 || s.busy(op.Shard) {
		return false
	}
	_, onFrom := sh.ReplicaOn(op.From)
	_, onTo := sh.ReplicaOn(op.To)
	toActive := s.Nodes[op.To] != nil && s.Nodes[op.To].State == NodeActive
	switch op.Kind {
	case OpKindMoveReplica:
		return onFrom && !onTo && toActive
	case OpKindAddReplica:
		return !onTo && toActive && (op.From == 0 || onFrom)
	case OpKindRemoveReplica:
		return onFrom && len(sh.Replicas) > 1
	case OpKindTransferLeader:
		return onTo
	}
	return false
}

// unfinished returns the operation id names if it has not ended.
func (s *State) unfinished(id OperationID) *Operation {
	op := s.Operations[id]
	if op == nil || op.Finished() {
		return nil
	}
	return op
}

// startOperation marks a pending operation running.
func (s *State) startOperation(id OperationID, nowMs int64) uint64 {
	op := s.unfinished(id)
	if op == nil {
		return ResultNotFound
	}
	if op.Status == OperationRunning {
		return ResultNoop
	}
	op.Status, op.StartedAtMs = OperationRunning, nowMs
	s.Version++
	return ResultOK
}

// advanceOperation records that step of operation id completed and changes
// the placement the step implies: after add-learner the new replica is in
// the shard's replica list (with Join set, so its host starts it joining);
// after remove-replica the removed one is gone from it (so its host stops
// it and deletes its data). A step other than the current one is a no-op:
// a retried or stale proposal cannot skip or repeat a step; so is every
// step of an operation being cancelled (its executor rolls it back from
// the step it is at). After the last
// step the operation is done (and an admin operation makes its meta change:
// completeAdmin).
func (s *State) advanceOperation(id OperationID, step int, nowMs int64) uint64 {
	op := s.unfinished(id)
	if op == nil {
		return ResultNotFound
	}
	if step != op.Current || step >= len(op.Steps) || op.Cancel != "" {
		return ResultNoop
	}
	sh := s.Shards[op.Shard]
	switch st := op.Steps[step]; st.Kind {
	case StepAddLearner:
		if sh != nil {
			if _, ok := sh.ReplicaOn(st.Node); !ok {
				sh.Replicas = append(sh.Replicas, Replica{ID: op.NewReplica, Node: st.Node, Join: true})
				slices.SortFunc(sh.Replicas, func(a, b Replica) int { return cmp.Compare(a.ID, b.ID) })
			}
		}
	case StepRemoveReplica:
		if sh != nil {
			sh.Replicas = slices.DeleteFunc(sh.Replicas, func(r Replica) bool { return r.Node == st.Node })
		}
	}
	op.Current++
	op.Error = "" // a failed attempt noted by note_step is behind it
	if op.StartedAtMs == 0 {
		op.StartedAtMs = nowMs
	}
	op.Status = OperationRunning
	if op.Current == len(op.Steps) {
		op.Status, op.FinishedAtMs = OperationDone, nowMs
		if op.Kind.Admin() {
			s.completeAdmin(op, nowMs)
		}
	}
	s.Version++
	return ResultOK
}

// finishOperation ends an unfinished operation as failed or rolled back.
// Rolling back takes the replica the operation added out of the shard's
// replica list (its host stops it and deletes its data); it is refused
// (ResultInvalid) once a replica was removed, since the shard can no
// longer go back to how it was.
func (s *State) finishOperation(id OperationID, status OperationStatus, why string, nowMs int64) uint64 {
	op := s.unfinished(id)
	if op == nil {
		return ResultNotFound
	}
	if status == OperationRolledBack {
		for _, st := range op.Steps[:op.Current] {
			if st.Kind == StepRemoveReplica {
				return ResultInvalid
			}
		}
		if sh := s.Shards[op.Shard]; sh != nil && op.NewReplica != 0 {
			sh.Replicas = slices.DeleteFunc(sh.Replicas, func(r Replica) bool { return r.ID == op.NewReplica })
		}
	}
	if t := s.Topics[op.Topic]; t != nil && op.Kind == OpKindDeleteTopic && t.Deleting == op.ID {
		t.Deleting = 0 // abandoned: the topic is usable again
	}
	op.Status, op.Error, op.FinishedAtMs = status, why, nowMs
	s.Version++
	return ResultOK
}
