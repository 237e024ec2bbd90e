package operator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
)

// execHost is the executor's Host over the real meta state machine
// (fakeHost): the membership changes succeed at once, a leadership
// transfer moves the shard's leader, and the steps a node reports itself
// (wait-catch-up, delete-data) are reported only by the nodes in reports,
// as their hosts would on the meta change that asks for them.
type execHost struct {
	fakeHost
	lmu     sync.Mutex
	leaders map[uint64]uint64 // shard → leading node
	reports map[meta.NodeID]bool
	// removeErr, when set, fails every RemoveReplica.
	removeErr error
}

func (h *execHost) AddLearner(context.Context, uint64, uint64, string) error { return nil }
func (h *execHost) Promote(context.Context, uint64, uint64, string) error    { return nil }
func (h *execHost) RemoveReplica(context.Context, uint64, uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removeErr
}

func (h *execHost) TransferLeadership(_ context.Context, shard, toNode uint64) error {
	h.lmu.Lock()
	defer h.lmu.Unlock()
	h.leaders[shard] = toNode
	return nil
}

func (h *execHost) ShardLeader(shard uint64) uint64 {
	h.lmu.Lock()
	defer h.lmu.Unlock()
	if n, ok := h.leaders[shard]; ok {
		return n
	}
	return 1
}

// ProposeMeta applies c and then lets the reporting nodes complete what
// the new state asks of them.
func (h *execHost) ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error) {
	code, data, err := h.fakeHost.ProposeMeta(ctx, c)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.st.Unfinished() {
		if op.Status != meta.OperationRunning || !h.reports[op.Steps[op.Current].Node] {
			continue
		}
		if k := op.Steps[op.Current].Kind; k == meta.StepWaitCatchUp || k == meta.StepDeleteData {
			h.st.Apply(&meta.Command{Op: meta.OpAdvanceOperation, OperationID: op.ID, Step: op.Current})
		}
	}
	return code, data, err
}

// atDeleteData submits a move of each shard from node from to node to and
// records its steps done up to delete-data, as an executor would have
// before from failed.
func atDeleteData(t *testing.T, st *meta.State, from, to meta.NodeID, shards ...meta.EventShardID) []meta.OperationID {
	t.Helper()
	var ids []meta.OperationID
	for _, sh := range shards {
		op := meta.NewMoveReplica(sh, from, to, 0, "drain", meta.DefaultStepTimeouts())
		if code, _ := st.Apply(&meta.Command{Op: meta.OpSubmitOperations, Operations: []meta.Operation{op}}); code != meta.ResultOK {
			t.Fatalf("submit move of shard %d = %d, want OK", sh, code)
		}
		id := st.NextOperationID - 1
		st.Apply(&meta.Command{Op: meta.OpStartOperation, OperationID: id})
		for i, s := range op.Steps {
			if s.Kind == meta.StepDeleteData {
				break
			}
			st.Apply(&meta.Command{Op: meta.OpAdvanceOperation, OperationID: id, Step: i})
		}
		if got := st.Operations[id]; got.Steps[got.Current].Kind != meta.StepDeleteData {
			t.Fatalf("operation %d at step %s, want delete-data", id, got.Steps[got.Current].Kind)
		}
		ids = append(ids, id)
	}
	return ids
}

// Four moves off node 3 past their remove-replica step when node 3 fails
// (it dies while it drains): delete-data is the step only node 3's own
// host reports, so before the fix they waited there forever, holding the
// executor's four slots and their shards, and a fifth operation never
// started. Node 3 is declared dead and force-removed; 30 step timeouts
// later every move has ended with delete-data skipped and saying why, and
// the fifth operation has run.
func TestExecutorSkipsDeleteDataOfARemovedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := cluster(5)
		moves := atDeleteData(t, st, 3, 4, 100, 101, 102, 103)
		for _, c := range []*meta.Command{
			{Op: meta.OpDeclareDead, NodeID: 3},
			{Op: meta.OpSetNodeState, NodeID: 3, NodeState: meta.NodeRemoved, Force: true},
			{Op: meta.OpSubmitOperations, Operations: []meta.Operation{meta.NewTransferLeader(104, 1, 2, "leader-balance", meta.DefaultStepTimeouts())}},
		} {
			if code, _ := st.Apply(c); code != meta.ResultOK {
				t.Fatalf("%s = %d, want OK", c.Op, code)
			}
		}
		other := st.NextOperationID - 1
		h := &execHost{fakeHost: fakeHost{st: st, leader: 1}, leaders: map[uint64]uint64{}, reports: map[meta.NodeID]bool{1: true, 2: true, 4: true, 5: true}}
		e := New(h, peer.New(nil), 1, Config{}, zaptest.NewLogger(t), nil)
		e.Start(t.Context())
		time.Sleep(30 * meta.DefaultStepTimeouts().Step)
		synctest.Wait()
		e.Stop()

		got, _ := h.ReadMeta(context.Background())
		for _, id := range moves {
			op := got.Operations[id]
			if op.Status != meta.OperationDone {
				t.Errorf("move %d (shard %d) after 30 step timeouts: %s at step %d (%s), want done", id, op.Shard, op.Status, op.Current, op.Steps[op.Current].Kind)
				continue
			}
			last := op.Steps[len(op.Steps)-1]
			if want := "skipped: node 3 removed"; !strings.HasPrefix(last.Outcome, want) {
				t.Errorf("move %d: delete-data outcome %q, want it to start %q", id, last.Outcome, want)
			}
		}
		if op := got.Operations[other]; op.Status != meta.OperationDone {
			t.Errorf("operation %d queued behind the moves: %s, want done", other, op.Status)
		}
	})
}

// Every step that waits on a node ends with a recorded outcome, never
// later than its timeout: a delete-data of a dead node is skipped at once,
// one of a live node that never reports is skipped at the step's timeout;
// a move onto a node that dies before its learner caught up rolls back
// without waiting for the catch-up timeout.
func TestExecutorEndsStepsOfGoneNodes(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, st *meta.State) meta.OperationID
		reports map[meta.NodeID]bool
		later   *meta.Command // proposed 5s after the executor started
		within  time.Duration
		status  meta.OperationStatus
		outcome string // of the delete-data step, or in Error
	}{
		{"delete-data of a dead node", func(t *testing.T, st *meta.State) meta.OperationID {
			id := atDeleteData(t, st, 3, 4, 100)[0]
			st.Apply(&meta.Command{Op: meta.OpDeclareDead, NodeID: 3})
			return id
		}, map[meta.NodeID]bool{4: true}, nil, time.Second, meta.OperationDone, "skipped: node 3 dead; its host deletes"},
		{"delete-data of a node that never reports", func(t *testing.T, st *meta.State) meta.OperationID {
			return atDeleteData(t, st, 3, 4, 100)[0]
		}, map[meta.NodeID]bool{4: true}, nil, meta.DefaultStepTimeouts().Step + 2*time.Second, meta.OperationDone, "skipped: node 3 did not report within 30s"},
		{"catch-up onto a node that died", func(t *testing.T, st *meta.State) meta.OperationID {
			op := meta.NewMoveReplica(100, 3, 4, 0, "drain", meta.DefaultStepTimeouts())
			st.Apply(&meta.Command{Op: meta.OpSubmitOperations, Operations: []meta.Operation{op}})
			id := st.NextOperationID - 1
			st.Apply(&meta.Command{Op: meta.OpStartOperation, OperationID: id})
			st.Apply(&meta.Command{Op: meta.OpAdvanceOperation, OperationID: id, Step: 0})
			st.Apply(&meta.Command{Op: meta.OpDeclareDead, NodeID: 4})
			return id
		}, nil, nil, time.Second, meta.OperationRolledBack, "wait-catch-up: operator: the step's node is gone: node 4 is dead"},
		// The executor waits for node 4's catch-up (10 minutes at most)
		// when an operator cancels: the wait ends and the move rolls back.
		{"cancelled while it waits for a catch-up", func(t *testing.T, st *meta.State) meta.OperationID {
			op := meta.NewMoveReplica(100, 3, 4, 0, "drain", meta.DefaultStepTimeouts())
			st.Apply(&meta.Command{Op: meta.OpSubmitOperations, Operations: []meta.Operation{op}})
			return st.NextOperationID - 1
		}, nil, &meta.Command{Op: meta.OpCancelOperation, OperationID: 1, Error: "by test"}, 10 * time.Second, meta.OperationRolledBack,
			"wait-catch-up: cancelled: by test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := cluster(5)
				id := tt.prepare(t, st)
				h := &execHost{fakeHost: fakeHost{st: st, leader: 1}, leaders: map[uint64]uint64{}, reports: tt.reports}
				e := New(h, peer.New(nil), 1, Config{}, zaptest.NewLogger(t), nil)
				e.Start(t.Context())
				if tt.later != nil {
					time.Sleep(5 * time.Second)
					if code, _, _ := h.ProposeMeta(t.Context(), tt.later); code != meta.ResultOK {
						t.Fatalf("%s = %d, want OK", tt.later.Op, code)
					}
				}
				time.Sleep(tt.within)
				synctest.Wait()
				e.Stop()
				got, _ := h.ReadMeta(context.Background())
				op := got.Operations[id]
				said := op.Error
				if tt.status == meta.OperationDone {
					said = op.Steps[len(op.Steps)-1].Outcome
				}
				if op.Status != tt.status || !strings.HasPrefix(said, tt.outcome) {
					t.Fatalf("after %v: operation %s (%q), want %s (%q...)", tt.within, op.Status, said, tt.status, tt.outcome)
				}
				if _, placed := got.Shards[100].ReplicaOn(4); placed != (tt.status == meta.OperationDone) {
					t.Fatalf("shard 100 placed on node 4: %v, want %v", placed, tt.status == meta.OperationDone)
				}
			})
		})
	}
}

// A remove-replica the shard's replicas cannot make is retried (the old
// replica is leaving: there is no going back) and each failed attempt is
// recorded in the operation's error, so it never waits without saying
// why; a cancel of it is refused, and it goes on once the removal works.
func TestExecutorRecordsRetriedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := cluster(5)
		op := meta.NewRemoveReplica(100, 3, 0, false, "replica-balance", meta.DefaultStepTimeouts())
		st.Apply(&meta.Command{Op: meta.OpSubmitOperations, Operations: []meta.Operation{op}})
		id := st.NextOperationID - 1
		h := &execHost{fakeHost: fakeHost{st: st, leader: 1}, leaders: map[uint64]uint64{}, reports: map[meta.NodeID]bool{3: true},
			removeErr: errors.New("shard 100 remove-replica: no host answered")}
		e := New(h, peer.New(nil), 1, Config{}, zaptest.NewLogger(t), nil)
		e.Start(t.Context())
		time.Sleep(3 * time.Second)
		synctest.Wait()
		got, _ := h.ReadMeta(context.Background())
		if op := got.Operations[id]; op.Status != meta.OperationRunning || op.Error != "remove-replica: attempt failed, retrying: shard 100 remove-replica: no host answered" {
			t.Fatalf("after failed attempts: %s, error %q; want running, the attempt's failure recorded", op.Status, op.Error)
		}
		if code, _, _ := h.ProposeMeta(t.Context(), &meta.Command{Op: meta.OpCancelOperation, OperationID: id, Error: "by test"}); code != meta.ResultCannotCancel {
			t.Fatalf("cancel at remove-replica = %d, want ResultCannotCancel", code)
		}
		h.mu.Lock()
		h.removeErr = nil
		h.mu.Unlock()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		e.Stop()
		got, _ = h.ReadMeta(context.Background())
		if op := got.Operations[id]; op.Status != meta.OperationDone || op.Error != "" {
			t.Fatalf("once the removal works: %s, error %q; want done, no error", op.Status, op.Error)
		}
	})
}
