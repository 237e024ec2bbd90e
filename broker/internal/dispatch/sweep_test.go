package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

func TestSweepRepeatsUntilNothingIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{MaxSweepBatch: 4, DedupWindow: time.Minute})
		publishedAt := time.UnixMilli(1_000_000)
		publish := func(reqID string, at time.Time) []byte {
			p := &fsmpb.Publish{RequestId: reqID, NowMs: at.UnixMilli(), Messages: []*fsmpb.StoredMessage{{Topic: "t", DueAtMs: at.UnixMilli() + int64(time.Hour/time.Millisecond)}}}
			out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
			if err != nil {
				t.Fatalf("publish %s: %v", reqID, err)
			}
			return out.Published[0].MessageId
		}
		var first [][]byte
		for i := range 10 {
			first = append(first, publish(fmt.Sprintf("req-%d", i), publishedAt))
		}
		r.d.sweep(publishedAt.Add(2 * time.Minute))
		// Every request id is forgotten, though one sweep command forgets at
		// most 4: a retried request id makes a new message.
		for i, was := range first {
			if got := publish(fmt.Sprintf("req-%d", i), publishedAt.Add(3*time.Minute)); bytes.Equal(got, was) {
				t.Errorf("publish(req-%d) after the sweep answered the first message id: the dedup record was kept", i)
			}
		}
	})
}

// The sweep runs every SweepInterval however far the next due message is:
// a dispatcher whose only message is due in an hour still forgets a
// request id once its window is over. Before, the loop slept until the
// hour mark and the id was remembered all that time.
func TestSweepRunsWhileNextDueIsFarOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{DedupWindow: time.Second, SweepInterval: 100 * time.Millisecond})
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 100)
		r.d.Attach(c)
		publish := func(reqID string) []byte {
			now := time.Now().UnixMilli()
			p := &fsmpb.Publish{RequestId: reqID, NowMs: now, Messages: []*fsmpb.StoredMessage{{Topic: "t", DueAtMs: now + time.Hour.Milliseconds()}}}
			out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
			if err != nil {
				t.Fatalf("publish %s: %v", reqID, err)
			}
			return out.Published[0].MessageId
		}
		first := publish("req")
		synctest.Wait() // the loop sleeps; its next delivery is an hour out
		if got := publish("req"); !bytes.Equal(got, first) {
			t.Fatalf("publish(req) within the window made a new message: the dedup record was lost")
		}
		// Past the window and two sweep intervals more, the loop has swept.
		time.Sleep(time.Second + 200*time.Millisecond)
		synctest.Wait()
		if got := publish("req"); bytes.Equal(got, first) {
			t.Fatalf("publish(req) %v after the first answered the first message id: no sweep ran while the next delivery was an hour out", time.Second+200*time.Millisecond)
		}
	})
}

// A shard with nothing to forget pays for its sweeps with one round per
// SweepInterval and no Raft entry: the loop sleeps between sweeps rather
// than polling, and a sweep that finds no record proposes no command.
func TestIdleSweepProposesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 100 * time.Millisecond
		r := newRigWith(t, Config{DedupWindow: time.Second, SweepInterval: interval})
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 100)
		r.d.Attach(c)
		r.publish("t", time.Now().UnixMilli()+time.Hour.Milliseconds())
		synctest.Wait()
		r.log.mu.Lock()
		entries := r.log.index
		r.log.mu.Unlock()
		rounds := r.rounds()
		const idle = 10 * time.Second
		time.Sleep(idle)
		synctest.Wait()
		r.log.mu.Lock()
		got := r.log.index - entries
		r.log.mu.Unlock()
		if got != 0 {
			t.Errorf("an idle shard proposed %d entries in %v, want 0 (nothing to forget)", got, idle)
		}
		if n, most := r.rounds()-rounds, float64(idle/interval); n > most {
			t.Errorf("an idle shard ran %v rounds in %v, want at most %v (one per sweep interval)", n, idle, most)
		}
	})
}
