package dispatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/proto/receipt"
)

// A cancel answered DONE in the previous term may not be applied locally
// when Dragonboat reports the new leadership: the barrier applies it, and
// nothing is scanned or pushed before the barrier passed.
func TestNothingPushedBeforeBarrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var r *rig
		var cancelled receipt.MessageID
		var reads atomic.Int32
		log := &shardLog{read: func(ctx context.Context) error {
			if reads.Add(1) > 1 {
				return nil
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			// The previous term's cancel, committed but not applied here
			// until the read's index is.
			cancel := &fsmpb.Change{NowMs: time.Now().UnixMilli(), Topic: "t", Cancel: true, MessageId: cancelled[:]}
			out, err := r.log.propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Change{Change: cancel}})
			if err != nil || out.GetChange().GetCode() != fsmpb.ChangeCode_CHANGE_CODE_DONE {
				t.Errorf("cancel = %v, %v; want DONE", out.GetChange(), err)
			}
			return nil
		}}
		r = newRigLog(t, Config{BarrierTimeout: time.Minute}, log)
		cancelled = r.publish("t", time.Now().UnixMilli())[0]
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		if g, ok := next(c, 500*time.Millisecond); ok {
			t.Fatalf("delivered %v before the leader barrier passed", g.d.MessageId)
		}
		if n := log.leases.Load(); n != 0 {
			t.Fatalf("%d leases proposed before the leader barrier passed, want none", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := r.d.CaughtUp(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("CaughtUp() before the barrier = %v, want DeadlineExceeded", err)
		}
		close(gate)
		if err := r.d.CaughtUp(context.Background()); err != nil {
			t.Fatalf("CaughtUp() = %v", err)
		}
		if g, ok := next(c, 500*time.Millisecond); ok {
			t.Fatalf("delivered %v, cancelled in the previous term", g.d.MessageId)
		}
		r.publish("t", time.Now().UnixMilli())
		if _, ok := next(c, 5*time.Second); !ok {
			t.Fatalf("no delivery after the barrier passed")
		}
	})
}

func TestCaughtUpAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &shardLog{read: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		r := newRigLog(t, Config{}, log)
		r.d.Stop()
		if err := r.d.CaughtUp(context.Background()); !errors.Is(err, ErrStopped) {
			t.Fatalf("CaughtUp() after Stop = %v, want ErrStopped", err)
		}
	})
}

// While the leader lease holds, at-least-once copies are pushed before
// their lease commits (the latency design).
func TestPushBeforeLeaseCommitWhileLeaderLeaseHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, log := pushedAheadOfLease(t)
		close(log.leaseGate)
	})
}

// Once no read confirmed leadership within the leader lease, this replica
// may have been deposed: a delivery waits for its lease to commit.
func TestNoPushBeforeLeaseCommitOnceLeaderLeaseLapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int32
		log := &shardLog{leaseGate: make(chan struct{}), read: func(ctx context.Context) error {
			if reads.Add(1) == 1 {
				return nil // the barrier passes; no renewal does
			}
			<-ctx.Done()
			return ctx.Err()
		}}
		r := newRigLog(t, Config{LeaderLeaseTimeout: 50 * time.Millisecond}, log)
		if err := r.d.CaughtUp(context.Background()); err != nil {
			t.Fatalf("CaughtUp() = %v", err)
		}
		time.Sleep(50 * time.Millisecond) // simulated: the lease from the barrier runs out
		if left := r.d.lease.remaining(time.Now()); left > 0 {
			t.Fatalf("leader lease left = %v after its timeout with no renewal passing, want none", left)
		}
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		r.publish("t", time.Now().UnixMilli())
		if g, ok := next(c, 500*time.Millisecond); ok {
			t.Fatalf("delivered %v before its lease committed, with the leader lease lapsed", g.d.MessageId)
		}
		close(log.leaseGate)
		g, ok := next(c, 5*time.Second)
		if !ok {
			t.Fatalf("not delivered after its lease committed")
		}
		if code := r.ack(g.d); code != fsmpb.RefCode_REF_CODE_OK {
			t.Fatalf("ack = %v, want OK: the pushed delivery's lease is the committed one", code)
		}
		if reads.Load() < 2 {
			t.Fatalf("reads = %d, want a renewal attempt after the barrier", reads.Load())
		}
	})
}

// An attached consumer keeps the leader lease renewed through a quiet
// spell, so the first delivery after it is still pushed ahead of its lease,
// whenever in the renewal cycle it comes.
func TestLeaderLeaseRenewedWhileConsumed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reads atomic.Int32
		log := &shardLog{leaseGate: make(chan struct{}), read: func(context.Context) error {
			reads.Add(1)
			time.Sleep(time.Millisecond) // a quorum round trip
			return nil
		}}
		r := newRigLog(t, Config{LeaderLeaseTimeout: 100 * time.Millisecond}, log)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		// Several lease lengths of (simulated) quiet: renewals keep it,
		// also while a renewal's read is on its way.
		if err := r.d.CaughtUp(context.Background()); err != nil {
			t.Fatalf("CaughtUp() = %v", err)
		}
		for ms := range 400 {
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if left := r.d.lease.remaining(time.Now()); left <= 0 {
				t.Fatalf("leader lease lapsed %dms into a quiet spell with a consumer attached (%d reads passed)", ms+1, reads.Load())
			}
		}
		r.publish("t", time.Now().UnixMilli())
		if _, ok := next(c, 5*time.Second); !ok {
			t.Fatalf("after a quiet spell, not pushed ahead of its lease commit (%d reads passed)", reads.Load())
		}
		close(log.leaseGate)
	})
}

// Before a leadership transfer the lease is given up for good: Dragonboat
// drops the leader's proposals meanwhile, so nothing is pushed ahead of
// its lease, even though reads still pass.
func TestNoPushBeforeLeaseCommitAfterEndLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &shardLog{leaseGate: make(chan struct{})}
		r := newRigLog(t, Config{LeaderLeaseTimeout: time.Hour}, log)
		if err := r.d.CaughtUp(context.Background()); err != nil {
			t.Fatalf("CaughtUp() = %v", err)
		}
		if err := r.d.EndLease(context.Background()); err != nil {
			t.Fatalf("EndLease() = %v with nothing in flight", err)
		}
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		r.publish("t", time.Now().UnixMilli())
		if g, ok := next(c, 500*time.Millisecond); ok {
			t.Fatalf("delivered %v before its lease committed, after EndLease", g.d.MessageId)
		}
		close(log.leaseGate)
		if _, ok := next(c, 5*time.Second); !ok {
			t.Fatalf("not delivered after its lease committed")
		}
	})
}

// A leadership transfer must not begin while a lease whose copies were
// already pushed is in flight: Dragonboat may drop it, and the target
// would deliver the copies again while their consumer holds them. EndLease
// waits for the answer.
func TestEndLeaseWaitsForPushedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, log := pushedAheadOfLease(t)
		ended := make(chan error, 1)
		go func() { ended <- r.d.EndLease(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-ended:
			t.Fatalf("EndLease() = %v while the pushed lease is unanswered, want it to wait", err)
		default:
		}
		close(log.leaseGate)
		if err := <-ended; err != nil {
			t.Fatalf("EndLease() = %v once the lease committed", err)
		}
	})
}

// A copy pushed ahead of a lease proposal that then failed stays with its
// consumer until the deadline it was given: the round after the failure
// gives it to nobody else, even a consumer asking for it. Before, the copy
// was due again 100ms later; a second consumer got the same attempt, and
// its give-back made the copy due again under the first one's receipt.
func TestCopyPushedBeforeFailedLeaseWaitsForItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &shardLog{failLeases: 1}
		r := newRigLog(t, Config{}, log)
		first := NewConsumer("t", "default", []uint32{0}, 10*time.Second, false, 1)
		r.d.Attach(first)
		r.publish("t", time.Now().UnixMilli())
		g, ok := next(first, 5*time.Second)
		if !ok {
			t.Fatalf("not pushed ahead of its lease commit")
		}
		pushedAt := time.Now()
		second := NewConsumer("t", "default", []uint32{0}, 10*time.Second, false, 10)
		r.d.Attach(second)
		again, ok := next(second, time.Minute)
		if !ok {
			t.Fatalf("copy never delivered again after its lease failed")
		}
		if waited := time.Since(pushedAt); waited < 10*time.Second {
			t.Fatalf("copy delivered again %v after a push whose lease failed, before the 10s deadline its consumer was given", waited)
		}
		if again.d.Attempt != g.d.Attempt {
			t.Fatalf("redelivered attempt %d, want %d again (the failed lease never committed)", again.d.Attempt, g.d.Attempt)
		}
	})
}

// pushedAheadOfLease publishes one message while the leader lease holds
// and the log holds back every lease's commit (until leaseGate closes),
// and fails the test unless its copy reached the consumer ahead of the
// commit. Call it inside a synctest bubble.
func pushedAheadOfLease(t *testing.T) (*rig, *shardLog) {
	t.Helper()
	log := &shardLog{leaseGate: make(chan struct{})}
	r := newRigLog(t, Config{LeaderLeaseTimeout: time.Hour}, log)
	c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
	r.d.Attach(c)
	r.publish("t", time.Now().UnixMilli())
	if _, ok := next(c, 5*time.Second); !ok {
		t.Fatalf("not pushed ahead of its lease commit while the leader lease holds")
	}
	return r, log
}
