package dispatch

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// queueKey groups consumers reading the same copies.
type queueKey struct{ topic, group string }

type pick struct {
	item     *fsmpb.LeaseItem
	consumer *Consumer
	q        keys.Queue
	delivery *sundialv1.Delivery
}

// round picks what is due now, pushes it and has its lease committed, and
// returns when to look again (zero: only when woken).
//
// At-least-once copies are pushed while their lease proposal is in flight
// if this replica holds its leader lease (no other leader can exist yet)
// and no cancel or reschedule may be ordered ahead of the lease: waiting
// for the commit would add a replication round trip to every delivery's
// lateness, and if this leader dies before the commit the only harm is a
// second delivery by the next leader, which at-least-once allows. Without
// the leader lease they are pushed after the commit, like at-most-once
// copies, whose lease removes them so no leader can deliver them again.
func (d *Dispatcher) round() time.Time {
	// Take a lease slot before picking: while the slots are busy, credit
	// keeps arriving, and the next lease carries all of it at once instead
	// of one proposal per freed credit.
	select {
	case d.slots <- struct{}{}:
	case <-d.stopc:
		return time.Time{}
	}
	d.metrics.rounds.Inc()
	now := d.now()
	mark := d.fence.mark()
	picks, next := d.pickDue(now.UnixMilli())
	if len(picks) == 0 {
		<-d.slots
		return next
	}
	// Read every body first: an at-most-once lease deletes it. Expired
	// messages are never delivered: the next expiry command drops them.
	var unread []pick
	ready := picks[:0]
	bodies, err := d.index.bodies()
	if err != nil {
		d.log.Error("read due messages", zap.Uint64("shard_id", d.shard), zap.Error(err))
		d.settle(picks, make([]bool, len(picks)), nil)
		<-d.slots
		return now.Add(d.cfg.RetryInterval)
	}
	for _, p := range picks {
		if p.item.DeadLetter {
			ready = append(ready, p)
			continue
		}
		delivery, expiresAt, err := bodies.delivery(p)
		if err != nil {
			d.log.Error("read due message", zap.Uint64("shard_id", d.shard), zap.Error(err))
			unread = append(unread, p)
			continue
		}
		if expiresAt != 0 && expiresAt <= now.UnixMilli() {
			d.ttl.name(p.item.Ref.MessageId)
			unread = append(unread, p)
			continue
		}
		p.delivery = delivery
		ready = append(ready, p)
	}
	if err := bodies.close(); err != nil {
		d.log.Error("read due messages", zap.Uint64("shard_id", d.shard), zap.Error(err))
	}
	picks = ready
	d.settle(unread, make([]bool, len(unread)), nil)
	if len(picks) == 0 {
		<-d.slots
		return now.Add(d.cfg.RetryInterval)
	}
	pushed := make([]bool, len(picks))
	items := make([]*fsmpb.LeaseItem, len(picks))
	for i, p := range picks {
		items[i] = p.item
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	wait, err := d.start(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: now.UnixMilli(), Items: items}}})
	if err != nil {
		cancel()
		<-d.slots
		d.leaseFailed(picks, pushed, err)
		return time.Time{}
	}
	// The lease is queued in the Raft log ahead of any ack a consumer can
	// send for these deliveries: push the at-least-once ones now, unless a
	// change may be ordered between the pick and the lease, or this
	// replica may have been deposed (its leader lease lapsed): a new
	// leader would not know of the lease and deliver the copies again.
	early := d.fence.clearSince(mark) && d.lease.pushEarly(d.now())
	if early {
		var now []int
		for i, p := range picks {
			if !p.item.Remove && !p.item.DeadLetter {
				now = append(now, i)
			}
		}
		d.push(picks, now, pushed)
	}
	d.wg.Add(1)
	go d.commit(picks, pushed, early, wait, cancel)
	// next is now when a pick stopped at a limit with more due; else
	// nothing else is due before it, and the copies just picked are off
	// the due index once their lease applies.
	return next
}

// commit waits for the lease of picks, pushes the at-most-once ones that
// committed (and the at-least-once ones, unless pushed early) and releases
// the copies for later rounds.
func (d *Dispatcher) commit(picks []pick, pushed []bool, early bool, wait func() (*fsmpb.Outcome, error), cancel context.CancelFunc) {
	defer d.wg.Done()
	defer func() { <-d.slots }()
	out, err := wait()
	cancel()
	if early {
		d.lease.answered()
	}
	if err == nil && len(out.GetCodes()) != len(picks) {
		err = errors.New("dispatch: lease outcome does not match the items")
	}
	if err != nil {
		d.leaseFailed(picks, pushed, err)
		return
	}
	var now []int
	for i, p := range picks {
		switch {
		case p.item.DeadLetter && out.Codes[i] == fsmpb.RefCode_REF_CODE_OK:
			d.metrics.deadLettered.Inc()
		case (p.item.Remove || !early) && !p.item.DeadLetter && out.Codes[i] == fsmpb.RefCode_REF_CODE_OK:
			now = append(now, i)
			if !p.item.Remove {
				d.metrics.pushedAfterCommit.Inc()
			}
		}
	}
	d.push(picks, now, pushed)
	d.settle(picks, pushed, out.Codes)
	// A copy not pushed gave its credit back, one whose lease did not
	// commit as picked may still be due, and a consumer at MaxCredit
	// has room again: the next round may find work. Otherwise the round
	// that picked these already set the loop's timer.
	if needsRound(picks, pushed, out.Codes) {
		d.Wake()
	}
}

// needsRound reports whether settling picks freed anything a round could
// use: credit refunded (a copy not pushed), a copy left due (a lease code
// other than OK) or room of a consumer that a round skipped at MaxCredit.
func needsRound(picks []pick, pushed []bool, codes []fsmpb.RefCode) bool {
	for i, p := range picks {
		if (p.consumer != nil && !pushed[i]) || codes[i] != fsmpb.RefCode_REF_CODE_OK {
			return true
		}
		if p.consumer != nil && p.consumer.full.Load() {
			return true
		}
	}
	return false
}

// leaseFailed releases picks whose lease proposal failed, after a pause
// (the proposal may still commit) unless the dispatcher is stopping.
func (d *Dispatcher) leaseFailed(picks []pick, pushed []bool, err error) {
	if d.ctx.Err() == nil {
		d.log.Warn("lease proposal failed", zap.Uint64("shard_id", d.shard), zap.Int("copies", len(picks)), zap.Error(err))
		select {
		case <-time.After(d.cfg.RetryInterval):
		case <-d.stopc:
		}
	}
	d.settle(picks, pushed, nil)
	d.Wake() // the copies are due again and their credit is back
}

// push hands the deliveries of picks[i], for each i in which, to their
// consumers and marks them pushed. Each consumer gets its share in one
// push, so its stream takes them together and can send them in one frame;
// nothing waits for more. A consumer that went away meanwhile gets
// nothing: its copies are given back at once (its credit went with it).
func (d *Dispatcher) push(picks []pick, which []int, pushed []bool) {
	var order []*Consumer
	byConsumer := make(map[*Consumer][]*sundialv1.Delivery, 1)
	for _, i := range which {
		p := picks[i]
		if _, ok := byConsumer[p.consumer]; !ok {
			order = append(order, p.consumer)
		}
		byConsumer[p.consumer] = append(byConsumer[p.consumer], p.delivery)
		pushed[i] = true
	}
	for _, c := range order {
		ds := byConsumer[c]
		if !c.push(ds...) {
			d.release(ds)
			continue
		}
		// Lateness is taken at the push itself, not at the round's start.
		pushedAt := d.now()
		for _, dl := range ds {
			d.metrics.delivered(pushedAt, dl.DueAtUnixMs, uint32(dl.Attempt))
			if dl.Attempt == 1 {
				d.lateness.observe(queueKey{c.Topic, c.Group}, pushedAt.UnixMilli(), pushedAt.UnixMilli()-dl.DueAtUnixMs)
			}
		}
	}
}

// settle releases picks for later rounds and refunds the credit of those
// not pushed. codes (nil when the proposal failed) counts lease conflicts.
// A copy that a round passed over while it was being leased wakes the
// loop: it may be due again already (nacked right behind its lease), and
// the round that skipped it did not count on it.
//
// A copy pushed before a lease that failed is released only at the
// deadline its consumer was given: whether or not the lease committed, the
// consumer holds the delivery until then, and a round here must not hand
// the copy to another (whose give-back would then make it due again under
// the first consumer's receipt).
func (d *Dispatcher) settle(picks []pick, pushed []bool, codes []fsmpb.RefCode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var held map[int64][]string // deadline → copies held until it
	for i, p := range picks {
		k := leasingKey(p.item.Ref)
		switch {
		case codes == nil && pushed[i]:
			if held == nil {
				held = map[int64][]string{}
			}
			held[p.item.DeadlineMs] = append(held[p.item.DeadlineMs], k)
			d.metrics.heldPastFailedLease.Inc()
		case d.leasing.release(k):
			d.Wake()
		}
		if p.consumer != nil {
			p.consumer.picked--
			if !pushed[i] {
				p.consumer.credit++
			}
		}
		if codes != nil && codes[i] != fsmpb.RefCode_REF_CODE_OK && pushed[i] {
			d.metrics.leaseConflicts.Inc()
		}
	}
	for deadlineMs, ks := range held {
		d.releaseAt(deadlineMs, ks)
	}
}

// releaseAt releases the copies ks at deadlineMs (see settle).
func (d *Dispatcher) releaseAt(deadlineMs int64, ks []string) {
	time.AfterFunc(max(time.UnixMilli(deadlineMs).Sub(d.now()), 0), func() {
		d.mu.Lock()
		for _, k := range ks {
			d.leasing.release(k)
		}
		d.mu.Unlock()
		d.Wake()
	})
}

func leasingKey(ref *fsmpb.MessageRef) string {
	return string(ref.MessageId) + ref.Group
}

// leasingSet holds the copies being leased (see leasingKey), each true once
// a round passed it over for that.
type leasingSet map[string]bool

// skip reports whether the copy k is being leased, noting that a round
// passed it over.
func (s leasingSet) skip(k string) bool {
	if _, busy := s[k]; !busy {
		return false
	}
	s[k] = true
	return true
}

// release forgets k and reports whether a round passed it over meanwhile.
func (s leasingSet) release(k string) (skipped bool) {
	skipped = s[k]
	delete(s, k)
	return skipped
}

// pickDue scans the due index of every queue with credit and assigns each
// due copy to a consumer, spending credit. A queue's partitions are
// scanned in turn, each round starting at the next one, so a partition
// with many due copies cannot hold back the others on the shard: over
// rounds every partition with something due goes first as often.
func (d *Dispatcher) pickDue(nowMs int64) ([]pick, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	byQueue := map[queueKey][]*Consumer{}
	var order []queueKey
	topicParts := map[string]map[uint32]bool{} // the partitions read here, by topic
	for _, c := range d.consumers {
		k := queueKey{c.Topic, c.Group}
		if _, ok := byQueue[k]; !ok {
			order = append(order, k)
		}
		byQueue[k] = append(byQueue[k], c)
		if topicParts[c.Topic] == nil {
			topicParts[c.Topic] = map[uint32]bool{}
		}
		for _, p := range c.Partitions {
			topicParts[c.Topic][p] = true
		}
	}
	d.prune(byQueue, nowMs)
	var picks []pick
	var next time.Time
	for _, k := range order {
		cs := byQueue[k]
		credit := 0
		parts := map[uint32]bool{}
		for _, c := range cs {
			c.room = max(0, min(c.credit, d.cfg.MaxCredit-c.picked-c.buffered()))
			if c.room == 0 && c.credit > 0 {
				c.full.Store(true)
				d.metrics.consumerFull.Inc()
			}
			credit += c.room
			for _, p := range c.Partitions {
				parts[p] = true
			}
		}
		if credit == 0 {
			continue
		}
		policy := d.cfg.Policy(k.topic)
		rate := shardRate(policy, len(topicParts[k.topic]))
		allowed, refill := d.limiter.allowance(k.topic, rate, nowMs)
		if !refill.IsZero() && (next.IsZero() || refill.Before(next)) {
			next = refill
		}
		credit = min(credit, allowed)
		// Served queues advance the turn, so rounds that serve nobody do
		// not skip a partition's turn.
		d.turn++
		ordered := sortedKeys(parts)
		first := d.turn % max(len(ordered), 1)
		for _, part := range append(ordered[first:], ordered[:first]...) {
			q := keys.Queue{Topic: k.topic, Partition: part, Group: k.group}
			limit := min(credit, d.cfg.MaxLeaseBatch-len(picks))
			if limit <= 0 {
				if credit > 0 {
					return picks, time.UnixMilli(nowMs)
				}
				break
			}
			var due []dueItem
			var wakeAt time.Time
			var err error
			if policy.Fair {
				due, wakeAt, err = d.index.pickFair(q, d.fair.tree(q), nowMs, limit, policy.Weights, d.leasing)
				if err == nil && len(due) == limit {
					wakeAt = time.UnixMilli(nowMs)
				}
			} else {
				due, wakeAt, err = d.index.scan(q, nowMs, limit, d.leasing)
			}
			if err != nil {
				d.log.Error("scan due index", zap.Uint64("shard_id", d.shard), zap.Error(err))
				continue
			}
			for _, e := range due {
				d.leasing[leasingKey(e.item.Ref)] = false
				if policy.MaxAttempts > 0 && e.item.Ref.Attempt >= uint32(policy.MaxAttempts) {
					// Its attempts are used up: dead-letter it, spending
					// no credit.
					e.item.DeadLetter = true
					picks = append(picks, pick{item: e.item, q: q})
					continue
				}
				c := d.nextConsumer(cs, part)
				c.credit--
				c.room--
				c.picked++
				credit--
				d.limiter.spend(k.topic, rate)
				e.item.DeadlineMs = nowMs + c.VisibilityTimeout.Milliseconds()
				e.item.Remove = c.AtMostOnce
				picks = append(picks, pick{item: e.item, consumer: c, q: q})
			}
			if !wakeAt.IsZero() && (next.IsZero() || wakeAt.Before(next)) {
				next = wakeAt
			}
		}
	}
	return picks, next
}

// nextConsumer picks, round-robin, a consumer with room reading part.
func (d *Dispatcher) nextConsumer(cs []*Consumer, part uint32) *Consumer {
	for range cs {
		d.rr++
		c := cs[d.rr%len(cs)]
		if c.room > 0 && slices.Contains(c.Partitions, part) {
			return c
		}
	}
	return cs[0] // unreachable: the caller checked credit
}

// release gives deliveries that never reached a consumer back at once, so
// they need not wait for their lease to run out.
func (d *Dispatcher) release(ds []*sundialv1.Delivery) {
	refs := make([]*fsmpb.MessageRef, 0, len(ds))
	for _, dl := range ds {
		r, err := receipt.Parse(dl.Receipt)
		if err != nil {
			continue
		}
		refs = append(refs, &fsmpb.MessageRef{MessageId: slices.Clone(r.Message[:]), Group: r.Group, Attempt: r.Attempt})
	}
	if len(refs) == 0 {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		defer cancel()
		cmd := &fsmpb.Command{Kind: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Refs: refs, VisibleAtMs: d.now().UnixMilli(), Reason: "consumer went away"}}}
		if _, err := d.propose(ctx, cmd); err != nil && d.ctx.Err() == nil {
			d.log.Warn("release undelivered copies", zap.Uint64("shard_id", d.shard), zap.Int("copies", len(refs)), zap.Error(err))
		}
	}()
}

func sortedKeys(m map[uint32]bool) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
