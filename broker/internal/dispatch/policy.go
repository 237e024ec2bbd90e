package dispatch

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/keys"
	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// bucket is a token bucket limiting a topic's release rate; the burst is
// one second's worth.
type bucket struct {
	tokens float64
	lastMs int64
}

// allowance answers how many deliveries topic may release now, and when the
// next one is allowed if none is (zero time when unlimited). Caller holds mu.
func (d *Dispatcher) allowance(topic string, rate float64, nowMs int64) (int, time.Time) {
	if rate <= 0 {
		delete(d.buckets, topic)
		return math.MaxInt32, time.Time{}
	}
	b, ok := d.buckets[topic]
	if !ok {
		b = &bucket{tokens: max(rate, 1), lastMs: nowMs}
		d.buckets[topic] = b
	}
	b.tokens = min(b.tokens+rate*float64(nowMs-b.lastMs)/1000, max(rate, 1))
	b.lastMs = nowMs
	if b.tokens >= 1 {
		return int(b.tokens), time.Time{}
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return 0, time.UnixMilli(nowMs).Add(wait + time.Millisecond)
}

// spend takes one token of topic's bucket. Caller holds mu.
func (d *Dispatcher) spend(topic string, rate float64) {
	if b, ok := d.buckets[topic]; ok && rate > 0 {
		b.tokens--
	}
}

// histogram counts lateness in milliseconds in power-of-two buckets.
type histogram struct {
	counts [32]uint64
	total  uint64
	lastMs int64 // when the last delivery was counted
}

func (h *histogram) add(ms int64) {
	i := 0
	for v := max(ms, 0); v > 0 && i < len(h.counts)-1; v >>= 1 {
		i++
	}
	h.counts[i]++
	h.total++
}

// quantile is the upper bound of the bucket holding quantile q, in ms.
func (h *histogram) quantile(q float64) float64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == 0 {
				return 0
			}
			return float64(uint64(1) << (i - 1))
		}
	}
	return float64(uint64(1) << (len(h.counts) - 2))
}

func (d *Dispatcher) observeLateness(k queueKey, nowMs, ms int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.lateness[k]
	if !ok {
		h = &histogram{}
		d.lateness[k] = h
	}
	h.add(ms)
	h.lastMs = nowMs
}

// pruneInterval is how often a round drops the state of queues nobody
// reads; latenessIdle is how long a group's lateness outlives its last
// delivery once no consumer reads it (pull consumers attach only while
// they wait).
const (
	pruneInterval = 10 * time.Second
	latenessIdle  = time.Hour
)

// prune drops the state of topics and queues that no attached consumer
// reads (consumed lists the queues that are read), so deleted topics and
// groups leave nothing behind: fair-queueing state at once, a release-rate
// bucket once it has refilled (dropping it sooner would grant a fresh
// burst), a lateness histogram after latenessIdle. Caller holds mu.
func (d *Dispatcher) prune(consumed map[queueKey][]*Consumer, nowMs int64) {
	if nowMs-d.prunedMs < pruneInterval.Milliseconds() {
		return
	}
	d.prunedMs = nowMs
	topics := map[string]bool{}
	for k := range consumed {
		topics[k.topic] = true
	}
	for k := range d.fair {
		if _, ok := consumed[k]; !ok {
			delete(d.fair, k)
		}
	}
	for k, h := range d.lateness {
		if _, ok := consumed[k]; !ok && nowMs-h.lastMs >= latenessIdle.Milliseconds() {
			delete(d.lateness, k)
		}
	}
	for topic, b := range d.buckets {
		if topics[topic] {
			continue
		}
		rate := d.cfg.Policy(topic).ReleaseRate
		if rate <= 0 || b.tokens+rate*float64(nowMs-b.lastMs)/1000 >= max(rate, 1) {
			delete(d.buckets, topic)
		}
	}
}

// Lateness answers the p50 and p99 first-delivery lateness (ms, bucket
// upper bounds) of a topic's group since this dispatcher started; a group
// nobody read for latenessIdle starts again from nothing.
func (d *Dispatcher) Lateness(topic, group string) (p50, p99 float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.lateness[queueKey{topic, group}]
	if !ok {
		return 0, 0
	}
	return h.quantile(0.5), h.quantile(0.99)
}

// release gives deliveries that never reached a consumer back at once, so
// they need not wait for their lease to run out.
func (d *Dispatcher) release(ds []*sundialv1.Delivery) {
	refs := make([]*raftv1.MessageRef, 0, len(ds))
	for _, dl := range ds {
		r, err := receipt.Parse(dl.Receipt)
		if err != nil {
			continue
		}
		refs = append(refs, &raftv1.MessageRef{MessageId: slices.Clone(r.Message[:]), Group: r.Group, Attempt: r.Attempt})
	}
	if len(refs) == 0 {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		defer cancel()
		cmd := &raftv1.Command{Kind: &raftv1.Command_Nack{Nack: &raftv1.Nack{Refs: refs, VisibleAtMs: d.now().UnixMilli(), Reason: "consumer went away"}}}
		if _, err := d.propose(ctx, cmd); err != nil && d.ctx.Err() == nil {
			d.log.Warn("release undelivered copies", zap.Uint64("shard_id", d.shard), zap.Int("copies", len(refs)), zap.Error(err))
		}
	}()
}

// expireDue runs the TTL sweep if a message's time is up or the last round
// found expired copies, and answers when to look again (zero: no expiry
// known). Named copies it dropped may hide due ones behind them: then it
// answers now.
func (d *Dispatcher) expireDue(now time.Time) time.Time {
	nowMs := now.UnixMilli()
	if d.expiryReset.Swap(false) {
		d.nextExpiry = -1
	}
	if low := d.expiryLow.Swap(0); low != 0 && d.nextExpiry >= 0 && (d.nextExpiry == 0 || low < d.nextExpiry) {
		d.nextExpiry = low
	}
	named := d.expired
	d.expired = nil
	if len(named) > 0 {
		d.nextExpiry = nowMs
	}
	if d.nextExpiry < 0 {
		d.nextExpiry = d.firstExpiry()
	}
	if d.nextExpiry == 0 || d.nextExpiry > nowMs {
		if d.nextExpiry == 0 {
			return time.Time{}
		}
		return time.UnixMilli(d.nextExpiry)
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	// A failed proposal forgets the named copies: the next round that finds
	// them due names them again.
	out, err := d.propose(ctx, &raftv1.Command{Kind: &raftv1.Command_Expire{Expire: &raftv1.Expire{NowMs: nowMs, Limit: uint32(d.cfg.MaxExpireBatch), MessageIds: named}}})
	if err != nil {
		if d.ctx.Err() == nil {
			d.log.Warn("ttl expiry failed", zap.Uint64("shard_id", d.shard), zap.Int("named", len(named)), zap.Error(err))
		}
		return now.Add(d.cfg.RetryInterval)
	}
	d.metrics.expired.Add(float64(out.GetCount()))
	d.nextExpiry = d.firstExpiry()
	if len(named) > 0 && out.GetCount() > 0 {
		return now
	}
	if d.nextExpiry != 0 {
		return time.UnixMilli(d.nextExpiry)
	}
	return time.Time{}
}

// firstExpiry reads the earliest TTL expiry on the shard, 0 if none.
func (d *Dispatcher) firstExpiry() int64 {
	prefix := keys.ExpiryPrefix(d.shard)
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return 0
	}
	defer it.Close()
	if !it.First() {
		return 0
	}
	at, _, err := keys.ParseExpiry(it.Key())
	if err != nil {
		return 0
	}
	return max(at, 1)
}
