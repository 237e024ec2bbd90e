package dispatch

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// state reports which of the dispatcher's per-topic and per-queue maps
// hold an entry for topic.
func (d *Dispatcher) stateOf(topic string) (bucket, lateness, fair bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, bucket = d.limiter.buckets[topic]
	lateness = d.lateness.holds(queueKey{topic, "default"})
	_, fair = d.fair.queues[queueKey{topic, "default"}]
	return bucket, lateness, fair
}

// The release-rate bucket, lateness histogram and fair-queueing state of a
// topic nobody reads any more (deleted, or its consumers gone) are
// dropped; those of a topic still read are kept.
func TestStateOfUnreadQueuesIsPruned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{Policy: func(string) Policy { return Policy{Fair: true, ReleaseRate: 1000} }})
		now := time.Now().UnixMilli()
		gone := NewConsumer("gone", "default", []uint32{0}, time.Minute, false, 10)
		kept := NewConsumer("kept", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(gone)
		r.d.Attach(kept)
		for _, topic := range []string{"gone", "kept"} {
			r.publishMessages(&fsmpb.StoredMessage{Topic: topic, Payload: []byte(topic), DueAtMs: now, Fair: true, FairnessKey: "a"})
		}
		for _, c := range []*Consumer{gone, kept} {
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("no delivery on %s", c.Topic)
			}
			r.ack(g.d)
		}
		// Lateness is counted just after the push the consumer saw.
		synctest.Wait()
		for _, topic := range []string{"gone", "kept"} {
			if b, l, f := r.d.stateOf(topic); !b || !l || !f {
				t.Fatalf("state of %s after a delivery = bucket %v, lateness %v, fair %v, want all", topic, b, l, f)
			}
		}
		r.d.Detach(gone)
		// A round two hours on: past the prune interval, the bucket's refill
		// and the lateness idle time.
		r.d.pickDue(time.Now().Add(2 * time.Hour).UnixMilli())
		if b, l, f := r.d.stateOf("gone"); b || l || f {
			t.Errorf("state of unread topic = bucket %v, lateness %v, fair %v, want none", b, l, f)
		}
		if b, l, f := r.d.stateOf("kept"); !b || !l || !f {
			t.Errorf("state of read topic = bucket %v, lateness %v, fair %v, want all kept", b, l, f)
		}
	})
}
