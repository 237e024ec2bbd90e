package dispatch

import (
	"math"
	"time"
)

// limiter owns the release-rate token buckets, one per topic with a rate
// that an attached consumer reads. A bucket's burst is one second's worth
// of its rate, and at least one delivery.
//
// The rate of a topic's bucket on this shard is its share of the topic's
// release rate (shardRate): the rate times the share of the topic's
// partitions read here, so the shards holding a topic together release
// no more than the topic's rate. A shard whose partitions have nothing due
// does not lend its share to the others.
//
// It has no lock of its own: only the loop touches it (picking and
// pruning), under the dispatcher's mu.
type limiter struct {
	buckets map[string]*bucket // by topic
}

// bucket is the token bucket of one topic.
type bucket struct {
	tokens float64
	lastMs int64
	rate   float64 // the rate it was last filled at: this shard's share
}

func newLimiter() *limiter { return &limiter{buckets: map[string]*bucket{}} }

// allowance answers how many deliveries topic may release at nowMs, and
// when the next one is allowed if none is (zero time when unlimited).
func (l *limiter) allowance(topic string, rate float64, nowMs int64) (int, time.Time) {
	if rate <= 0 {
		delete(l.buckets, topic)
		return math.MaxInt32, time.Time{}
	}
	b, ok := l.buckets[topic]
	if !ok {
		b = &bucket{tokens: max(rate, 1), lastMs: nowMs}
		l.buckets[topic] = b
	}
	b.refill(rate, nowMs)
	b.rate = rate
	if b.tokens >= 1 {
		return int(b.tokens), time.Time{}
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return 0, time.UnixMilli(nowMs).Add(wait + time.Millisecond)
}

// spend takes one token of topic's bucket.
func (l *limiter) spend(topic string, rate float64) {
	if b, ok := l.buckets[topic]; ok && rate > 0 {
		b.tokens--
	}
}

// prune drops the buckets of topics nobody reads once they have refilled
// at the rate they were filled at (dropping one sooner would grant a fresh
// burst); rate answers a topic's current release rate, 0 dropping its
// bucket at once.
func (l *limiter) prune(read func(topic string) bool, rate func(topic string) float64, nowMs int64) {
	for topic, b := range l.buckets {
		if read(topic) {
			continue
		}
		r := rate(topic)
		if r > 0 && b.rate > 0 {
			r = b.rate // the share it fills at, not the topic's whole rate
		}
		if r <= 0 || b.tokens+r*float64(nowMs-b.lastMs)/1000 >= max(r, 1) {
			delete(l.buckets, topic)
		}
	}
}

func (b *bucket) refill(rate float64, nowMs int64) {
	b.tokens = min(b.tokens+rate*float64(nowMs-b.lastMs)/1000, max(rate, 1))
	b.lastMs = nowMs
}

// shardRate is the part of p's release rate a shard may use when its
// consumers read parts of the topic's partitions: the rate times
// parts/p.Partitions (the whole rate when p.Partitions is 0 or 1).
func shardRate(p Policy, parts int) float64 {
	if p.ReleaseRate <= 0 || p.Partitions <= 1 {
		return p.ReleaseRate
	}
	return p.ReleaseRate * float64(min(parts, int(p.Partitions))) / float64(p.Partitions)
}
