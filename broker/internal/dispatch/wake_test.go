package dispatch

import (
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// rounds is how many delivery rounds r's dispatcher has run.
func (r *rig) rounds() float64 {
	r.t.Helper()
	var m dto.Metric
	if err := r.d.metrics.rounds.Write(&m); err != nil {
		r.t.Fatalf("rounds.Write() error = %v", err)
	}
	return m.GetCounter().GetValue()
}

// A publish due after the instant the loop's timer is already set for
// needs no round now: the round at the timer sees it. Before, every
// applied publish (and every applied lease, whose copy moves to its
// deadline) woke the loop for a scan that found nothing due.
func TestInsertAfterArmedTimerRunsNoRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 100)
		r.d.Attach(c)
		now := time.Now().UnixMilli()
		r.publish("t", now+time.Hour.Milliseconds())
		synctest.Wait() // the loop sleeps until the hour mark
		before := r.rounds()
		for i := range 50 {
			r.publish("t", now+2*time.Hour.Milliseconds()+int64(i))
		}
		synctest.Wait()
		if got := r.rounds() - before; got != 0 {
			t.Fatalf("50 publishes due after the armed timer ran %v rounds, want 0", got)
		}
		// One due before the timer still wakes the loop at once.
		r.publish("t", time.Now().UnixMilli()+10)
		g, ok := next(c, 5*time.Second)
		if !ok {
			t.Fatalf("message due before the armed timer was never delivered")
		}
		if g.d.DueAtUnixMs != now+10 {
			t.Fatalf("delivered due %d, want %d", g.d.DueAtUnixMs, now+10)
		}
	})
}

// A steady trickle of messages, each due at its own instant, costs one
// round per due instant: neither the lease's application (which moves the
// copy to its deadline), nor its commit, nor the publish of the next one
// (due later) adds a round. Before, each delivery took four or more.
func TestOneRoundPerDueInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 1000)
		r.d.Attach(c)
		synctest.Wait()
		before := r.rounds()
		const n = 20
		for i := range n {
			due := time.Now().UnixMilli() + 100
			r.publish("t", due)
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("delivery %d missing", i)
			}
			if g.at.UnixMilli() < g.d.DueAtUnixMs {
				t.Fatalf("delivered at %d, before due %d", g.at.UnixMilli(), g.d.DueAtUnixMs)
			}
			synctest.Wait()
		}
		if got := r.rounds() - before; got != n {
			t.Fatalf("%d messages due at %d instants ran %v rounds, want %d", n, n, got, n)
		}
	})
}

// A round opens the due index only of queues that may have something due:
// one whose scan floor lies after now answers from the floor. Here the
// consumer reads two partitions and only partition 0 gets messages due
// soon; partition 1's next copy is an hour out.
func TestRoundReadsOnlyQueuesWithSomethingDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		now := time.Now().UnixMilli()
		r.publishMessages(&fsmpb.StoredMessage{Topic: "t", Partition: 1, Payload: []byte("later"), DueAtMs: now + time.Hour.Milliseconds()})
		c := NewConsumer("t", "default", []uint32{0, 1}, time.Minute, false, 100)
		r.d.Attach(c)
		synctest.Wait() // both queues scanned once: their floors are set
		r.d.mu.Lock()
		before := r.d.index.scans
		r.d.mu.Unlock()
		const n = 5
		for i := range n {
			r.publish("t", time.Now().UnixMilli()+100)
			if _, ok := next(c, 5*time.Second); !ok {
				t.Fatalf("delivery %d missing", i)
			}
			synctest.Wait()
		}
		r.d.mu.Lock()
		got := r.d.index.scans - before
		r.d.mu.Unlock()
		if got != n {
			t.Fatalf("%d rounds due in partition 0 opened %d scans, want %d (partition 1 has nothing due for an hour)", n, got, n)
		}
	})
}

// A copy nacked before the dispatcher heard its lease committed is
// delivered again when its delay is up. The lease was pushed early, the
// consumer nacked it at once and the nack applied right behind the lease;
// the round the nack's delay woke found the copy still marked as being
// leased and skipped it, and the lease's answer, which cleared that mark,
// woke nobody: the copy waited for an unrelated round (a minute's sweep).
// Seen as TestDeadLettersAndRedrive missing an attempt on a busy machine.
func TestNackAheadOfLeaseAnswerIsRedelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		r := newRigLog(t, Config{}, &shardLog{answerGate: gate})
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		r.publish("t", time.Now().UnixMilli())
		first, ok := next(c, 5*time.Second)
		if !ok {
			t.Fatalf("due message not delivered")
		}
		if code := r.nack(first.d, 1); code != fsmpb.RefCode_REF_CODE_OK {
			t.Fatalf("nack = %v, want OK", code)
		}
		time.Sleep(10 * time.Millisecond) // the nack's round runs, the lease unanswered
		synctest.Wait()
		close(gate)
		again, ok := next(c, 10*time.Second)
		if !ok {
			t.Fatalf("copy nacked with a 1ms delay was not delivered again within 10s")
		}
		if again.d.Attempt != first.d.Attempt+1 {
			t.Fatalf("redelivered attempt %d, want %d", again.d.Attempt, first.d.Attempt+1)
		}
	})
}
