package dispatch

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

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
	read := func(k queueKey) bool { _, ok := consumed[k]; return ok }
	topics := map[string]bool{}
	for k := range consumed {
		topics[k.topic] = true
	}
	d.fair.prune(read)
	d.lateness.prune(read, nowMs, latenessIdle.Milliseconds())
	d.limiter.prune(func(topic string) bool { return topics[topic] }, func(topic string) float64 { return d.cfg.Policy(topic).ReleaseRate }, nowMs)
}

// expireDue runs the TTL sweep if a message's time is up or the last round
// found expired copies, and answers when to look again (zero: no expiry
// known). Named copies it dropped may hide due ones behind them: then it
// answers now.
func (d *Dispatcher) expireDue(now time.Time) time.Time {
	nowMs := now.UnixMilli()
	named, run, at := d.ttl.due(nowMs)
	if !run {
		if at == 0 {
			return time.Time{}
		}
		return time.UnixMilli(at)
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	// A failed proposal forgets the named copies: the next round that finds
	// them due names them again.
	out, err := d.propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: nowMs, Limit: uint32(d.cfg.MaxExpireBatch), MessageIds: named}}})
	if err != nil {
		if d.ctx.Err() == nil {
			d.log.Warn("ttl expiry failed", zap.Uint64("shard_id", d.shard), zap.Int("named", len(named)), zap.Error(err))
		}
		return now.Add(d.cfg.RetryInterval)
	}
	d.metrics.expired.Add(float64(out.GetCount()))
	next := d.ttl.ran()
	if len(named) > 0 && out.GetCount() > 0 {
		return now
	}
	if next != 0 {
		return time.UnixMilli(next)
	}
	return time.Time{}
}

// sweep forgets the shard's publish dedup records older than the dedup
// window and the key and end records whose time came, one bounded command
// after another until a command answers that nothing is left. It proposes
// nothing when the local state holds no such record, so an idle shard's
// sweeps cost two reads of the store and no Raft entry.
func (d *Dispatcher) sweep(now time.Time) {
	sw := &fsmpb.Sweep{BeforeMs: now.Add(-d.cfg.DedupWindow).UnixMilli(), NowMs: now.UnixMilli(), Limit: uint32(d.cfg.MaxSweepBatch)}
	if !d.index.forgettable(sw.BeforeMs, sw.NowMs) {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := d.propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: sw}})
		cancel()
		if err != nil {
			d.log.Warn("dedup sweep failed", zap.Uint64("shard_id", d.shard), zap.Error(err))
			return
		}
		if !out.GetMore() {
			return
		}
		select {
		case <-d.stopc:
			return
		default:
		}
	}
}
