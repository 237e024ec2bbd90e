package meta

import (
	"encoding/json"
	"strings"
	"testing"
)

// moveAt submits a move of shard off its first replica's node onto node 4
// and records it done up to the step of kind at (started, nothing done:
// at is "").
func moveAt(t *testing.T, s *State, shard EventShardID, at StepKind) OperationID {
	t.Helper()
	from := s.Shards[shard].Replicas[0].Node
	id := submit(t, s, NewMoveReplica(shard, from, 4, 0, "balance", DefaultStepTimeouts()))[0]
	if at == "" {
		return id
	}
	s.Apply(&Command{Op: OpStartOperation, OperationID: id})
	for i, st := range s.Operations[id].Steps {
		if st.Kind == at {
			return id
		}
		if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: i}); code != ResultOK {
			t.Fatalf("advance step %d = %d, want OK", i, code)
		}
	}
	t.Fatalf("move has no step %s", at)
	return 0
}

// skip_step skips only a delete-data whose replica is out of the
// placement, only at the current step, and records the outcome.
func TestSkipStep(t *testing.T) {
	s, shard := fourNodes(t)
	id := moveAt(t, s, shard, StepPromote)
	if code, _ := s.Apply(&Command{Op: OpSkipStep, OperationID: id, Step: 2, Error: "skipped: x"}); code != ResultInvalid {
		t.Fatalf("skip of promote = %d, want ResultInvalid", code)
	}
	for i := 2; i < len(s.Operations[id].Steps)-1; i++ {
		s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: i})
	}
	last := len(s.Operations[id].Steps) - 1
	if code, _ := s.Apply(&Command{Op: OpSkipStep, OperationID: id, Step: last - 1, Error: "skipped: x"}); code != ResultNoop {
		t.Fatalf("skip of a step not current = %d, want ResultNoop", code)
	}
	if code, _ := s.Apply(&Command{Op: OpSkipStep, OperationID: id, Step: last, Error: "skipped: node 1 dead"}); code != ResultOK {
		t.Fatalf("skip of delete-data = %d, want ResultOK", code)
	}
	if op := s.Operations[id]; op.Status != OperationDone || op.Steps[last].Outcome != "skipped: node 1 dead" {
		t.Fatalf("after the skip: %s, outcome %q; want done, the outcome recorded", op.Status, op.Steps[last].Outcome)
	}
	if _, err := DecodeCommand((&Command{Op: OpSkipStep, OperationID: id, Step: last}).Encode()); err == nil {
		t.Fatal("skip_step without an outcome decoded, want ErrMalformedCommand")
	}
}

// cancel_operation ends an operation by the rollback of the step it is
// at, refuses where that cannot be done or would cost a shard its
// majority, and answers a finished operation as it is.
func TestCancelOperation(t *testing.T) {
	tests := []struct {
		name    string
		at      StepKind // "": pending
		dead    int      // how many of the shard's other replicas' nodes are dead
		code    uint64
		status  OperationStatus
		cancel  bool   // Cancel left set for the executor's rollback
		because string // in the refusal, Error or the delete-data outcome
	}{
		{name: "pending", code: ResultOK, status: OperationRolledBack, because: "cancelled before it started: by test"},
		{name: "at catch-up", at: StepWaitCatchUp, code: ResultOK, status: OperationRunning, cancel: true},
		{name: "at promote", at: StepPromote, code: ResultOK, status: OperationRunning, cancel: true},
		{name: "at promote, one other replica dead", at: StepPromote, dead: 1, code: ResultOK, status: OperationRunning, cancel: true},
		{name: "at promote, the majority would be lost", at: StepPromote, dead: 2, code: ResultCannotCancel, status: OperationRunning,
			because: "fewer than a majority"},
		{name: "at remove-replica", at: StepRemoveReplica, code: ResultCannotCancel, status: OperationRunning,
			because: "cannot be undone"},
		{name: "at delete-data", at: StepDeleteData, code: ResultOK, status: OperationDone, because: "skipped: cancelled (by test)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, shard := fourNodes(t)
			id := moveAt(t, s, shard, tt.at)
			for _, r := range s.Shards[shard].Replicas[1 : 1+tt.dead] {
				s.Apply(&Command{Op: OpDeclareDead, NodeID: r.Node})
			}
			code, data := s.Apply(&Command{Op: OpCancelOperation, OperationID: id, Error: "by test", NowMs: 2000})
			op := s.Operations[id]
			if code != tt.code || op.Status != tt.status || op.Status == OperationRunning && (op.Cancel != "") != tt.cancel {
				t.Fatalf("cancel = %d, operation %s, cancel %q; want %d, %s, cancel set %v", code, op.Status, op.Cancel, tt.code, tt.status, tt.cancel)
			}
			said := op.Error
			switch {
			case code == ResultCannotCancel:
				if err := json.Unmarshal(data, &said); err != nil {
					t.Fatalf("refusal data %q: %v", data, err)
				}
			case tt.status == OperationDone:
				said = op.Steps[len(op.Steps)-1].Outcome
			}
			if !strings.Contains(said, tt.because) {
				t.Fatalf("cancel said %q, want it to say %q", said, tt.because)
			}
			if tt.cancel {
				// Nothing advances while the executor rolls back.
				if code, _ := s.Apply(&Command{Op: OpAdvanceOperation, OperationID: id, Step: op.Current}); code != ResultNoop {
					t.Fatalf("advance of a cancelled operation = %d, want ResultNoop", code)
				}
			}
		})
	}
	s, shard := fourNodes(t)
	id := moveAt(t, s, shard, StepDeleteData)
	s.Apply(&Command{Op: OpCancelOperation, OperationID: id, Error: "by test"})
	if code, data := s.Apply(&Command{Op: OpCancelOperation, OperationID: id, Error: "again"}); code != ResultNoop || !strings.Contains(string(data), `"status":"done"`) {
		t.Fatalf("cancel of a finished operation = %d %s, want ResultNoop with the operation done", code, data)
	}
	if code, _ := s.Apply(&Command{Op: OpCancelOperation, OperationID: 99, Error: "by test"}); code != ResultNotFound {
		t.Fatalf("cancel of an unknown operation = %d, want ResultNotFound", code)
	}
}
