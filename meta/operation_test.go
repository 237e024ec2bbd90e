package meta

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestOperationJSONRoundTrip(t *testing.T) {
	ops := []Operation{
		NewMoveReplica(101, 3, 5, 4, "drain", DefaultStepTimeouts()),
		NewAddReplica(102, 6, 2, "repair", DefaultStepTimeouts()),
		NewRemoveReplica(103, 1, 2, true, "repair", DefaultStepTimeouts()),
		NewTransferLeader(104, 1, 2, "leader-balance", DefaultStepTimeouts()),
	}
	for _, op := range ops {
		t.Run(string(op.Kind), func(t *testing.T) {
			op.ID, op.NewReplica = 7, 42
			b, err := json.Marshal(op)
			if err != nil {
				t.Fatal(err)
			}
			var got Operation
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, op) {
				t.Fatalf("json.Unmarshal(%s) = %+v, want %+v", b, got, op)
			}
		})
	}
}

func TestOperationSteps(t *testing.T) {
	tests := []struct {
		op   Operation
		want string
	}{
		{NewMoveReplica(101, 3, 5, 4, "drain", DefaultStepTimeouts()),
			"move-replica shard=101 from=3 to=5 (drain): add-learner 5, wait-catch-up 5, promote 5, transfer-leader 4, remove-replica 3, delete-data 3"},
		{NewMoveReplica(101, 3, 5, 0, "replica-balance", DefaultStepTimeouts()),
			"move-replica shard=101 from=3 to=5 (replica-balance): add-learner 5, wait-catch-up 5, promote 5, remove-replica 3, delete-data 3"},
		{NewAddReplica(102, 6, 0, "repair", DefaultStepTimeouts()),
			"add-replica shard=102 to=6 (repair): add-learner 6, wait-catch-up 6, promote 6"},
		{NewRemoveReplica(103, 1, 0, true, "repair", DefaultStepTimeouts()),
			"remove-replica shard=103 from=1 (repair): remove-replica 1"},
	}
	for _, tt := range tests {
		if got := tt.op.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	// The old replica leaves only after the new one votes, and only then
	// does a failure roll forward.
	op := NewMoveReplica(101, 3, 5, 4, "drain", DefaultStepTimeouts())
	for i, s := range op.Steps {
		want := RollbackRemoveNew
		if s.Kind == StepRemoveReplica || s.Kind == StepDeleteData {
			want = RollbackRetry
		}
		if s.Rollback != want || s.TimeoutMs <= 0 {
			t.Errorf("step %d %s: rollback %s timeout %dms, want %s and a timeout", i, s.Kind, s.Rollback, s.TimeoutMs, want)
		}
	}
}
