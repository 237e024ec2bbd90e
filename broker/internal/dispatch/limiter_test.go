package dispatch

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

func TestLimiterAllowance(t *testing.T) {
	l := newLimiter()
	if n, next := l.allowance("t", 0, 0); n != math.MaxInt32 || !next.IsZero() {
		t.Fatalf("allowance(no rate) = %d, %v, want unlimited", n, next)
	}
	// A burst of one second's worth.
	if n, _ := l.allowance("t", 10, 1000); n != 10 {
		t.Fatalf("allowance(rate 10) at start = %d, want a burst of 10", n)
	}
	for range 10 {
		l.spend("t", 10)
	}
	n, next := l.allowance("t", 10, 1000)
	if n != 0 || next.UnixMilli() != 1000+100+1 {
		t.Fatalf("allowance after the burst = %d, %d, want 0 until 1101", n, next.UnixMilli())
	}
	if n, _ := l.allowance("t", 10, 1300); n != 3 {
		t.Fatalf("allowance 300ms later = %d, want 3", n)
	}
	// The burst is capped at one second's worth however long it was idle.
	if n, _ := l.allowance("t", 10, 1_000_000); n != 10 {
		t.Fatalf("allowance after a long idle spell = %d, want 10", n)
	}
	// A rate below 1/s still releases one.
	if n, _ := l.allowance("slow", 0.5, 0); n != 1 {
		t.Fatalf("allowance(rate 0.5) = %d, want 1", n)
	}
}

func TestLimiterPrune(t *testing.T) {
	rate := func(string) float64 { return 10 }
	read := func(topic string) bool { return topic == "read" }
	l := newLimiter()
	for _, topic := range []string{"read", "unread"} {
		l.allowance(topic, 10, 0)
		for range 10 {
			l.spend(topic, 10)
		}
	}
	l.prune(read, rate, 500)
	if _, ok := l.buckets["unread"]; !ok {
		t.Fatalf("prune dropped a bucket not yet refilled: a fresh burst would follow")
	}
	l.prune(read, rate, 1000)
	if _, ok := l.buckets["unread"]; ok {
		t.Fatalf("prune kept the refilled bucket of a topic nobody reads")
	}
	if _, ok := l.buckets["read"]; !ok {
		t.Fatalf("prune dropped the bucket of a topic still read")
	}
	// A bucket filled at a shard's share (0.5/s of a 4/s topic) refills at
	// that share, not at the topic's rate.
	l.allowance("share", 0.5, 0)
	l.spend("share", 0.5)
	topicRate := func(string) float64 { return 4 }
	l.prune(read, topicRate, 1000)
	if _, ok := l.buckets["share"]; !ok {
		t.Fatalf("prune dropped a share bucket refilled at the topic's rate but not at its share")
	}
	l.prune(read, topicRate, 2000)
	if _, ok := l.buckets["share"]; ok {
		t.Fatalf("prune kept a share bucket refilled at its share")
	}
}

// The release rate caps the topic, not each shard: four shards holding two
// partitions each of an 8-partition topic release together what one shard
// holding all eight would, a burst of one second's worth and then the
// rate, however many are due on each.
func TestReleaseRateIsTopicWide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate = 20
		policy := func(string) Policy { return Policy{ReleaseRate: rate, Partitions: 8} }
		var consumers []*Consumer
		for s := range uint32(4) {
			r := newRigWith(t, Config{Policy: policy})
			parts := []uint32{2 * s, 2*s + 1}
			now := time.Now().UnixMilli()
			var msgs []*fsmpb.StoredMessage
			for _, p := range parts {
				for range 50 {
					msgs = append(msgs, &fsmpb.StoredMessage{Topic: "t", Partition: p, DueAtMs: now})
				}
			}
			r.publishMessages(msgs...)
			c := NewConsumer("t", "default", parts, time.Minute, false, 1000)
			r.d.Attach(c)
			consumers = append(consumers, c)
		}
		// On the bubble's clock: what was released by just before the
		// second ends.
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		n := 0
		for _, c := range consumers {
			n += len(c.Take())
		}
		// Each shard's bucket may be a fraction of a token short at the
		// edge: at most one less per shard, never more than the rate.
		if n > 2*rate || n < 2*rate-len(consumers) {
			t.Fatalf("4 shards of an 8-partition topic released %d in one second at %d/s, want %d (a burst of %d, then %d/s)", n, rate, 2*rate, rate, rate)
		}
	})
}
