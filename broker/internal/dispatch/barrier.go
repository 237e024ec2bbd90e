package dispatch

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// ErrStopped is answered to a caller waiting for the barrier of a
// dispatcher that stopped first (its leadership ended).
var ErrStopped = errors.New("dispatch: dispatcher stopped")

// catchUp is the barrier of a new leader: Dragonboat reports leadership
// before the term's first entry commits, when the local state machine may
// not have applied the previous term's entries yet (a cancel answered
// DONE, an ack, a committed lease). It retries the read until it passes,
// starts the leader lease from when the passing read was issued and opens
// CaughtUp; false if the dispatcher stopped first.
func (d *Dispatcher) catchUp() bool {
	began := d.now()
	// The first read of a new leader is dropped until its no-op commits,
	// a few milliseconds later: start retrying fast.
	pause := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		issued := d.now()
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.BarrierTimeout)
		err := d.read(ctx)
		cancel()
		if err == nil {
			d.lease.confirmed(issued)
			close(d.caughtUp)
			d.metrics.barrierWait.Observe(d.now().Sub(began).Seconds())
			if attempt > 1 {
				d.log.Info("leader barrier passed", zap.Uint64("shard_id", d.shard), zap.Int("attempts", attempt))
			}
			return true
		}
		if d.ctx.Err() != nil {
			return false
		}
		// Warn only when it takes longer than a no-op commit.
		if attempt == 10 || attempt%100 == 0 {
			d.log.Warn("leader barrier not passed yet", zap.Uint64("shard_id", d.shard), zap.Int("attempts", attempt), zap.Error(err))
		}
		select {
		case <-time.After(pause):
		case <-d.stopc:
			return false
		}
		pause = min(2*pause, d.cfg.RetryInterval)
	}
}

// CaughtUp waits until the barrier of this leadership passed, so reads of
// the local state see everything committed before the term began. It
// answers ErrStopped if the dispatcher stopped first, or ctx's error.
func (d *Dispatcher) CaughtUp(ctx context.Context) error {
	select {
	case <-d.caughtUp:
		return nil
	default:
	}
	select {
	case <-d.caughtUp:
		return nil
	case <-d.stopc:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EndLease gives up the leader lease before a leadership transfer: during
// one Dragonboat drops this leader's proposals and the target is elected at
// once, so from now on deliveries wait for their lease to commit. It
// returns once every lease proposal whose copies were pushed before their
// commit was answered, so the transfer cannot drop one of them (the copies
// would then be due again on the target while their consumers hold them);
// ErrStopped if the dispatcher stopped first, or ctx's error.
func (d *Dispatcher) EndLease(ctx context.Context) error {
	select {
	case <-d.lease.end():
		return nil
	case <-d.stopc:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// renewLease confirms leadership again whenever a round asks for it, and
// every half lease while consumers are attached, so a delivery due after a
// quiet spell is still pushed while its lease is in flight. A tick skips
// the read only if more than three quarters of the lease are left (a round
// had it renewed since the last tick): what is left then outlasts the next
// tick with room for its read. Skipping with half the lease left, as
// before, let the lease lapse at every other tick for a read's duration.
func (d *Dispatcher) renewLease() {
	defer d.wg.Done()
	select {
	case <-d.caughtUp:
	case <-d.stopc:
		return
	}
	every := max(d.cfg.LeaderLeaseTimeout/2, time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-d.lease.renewals():
		case <-tick.C:
			if !d.consumed() || d.lease.remaining(d.now()) > every+every/2 {
				continue
			}
		case <-d.stopc:
			return
		}
		issued := d.now()
		ctx, cancel := context.WithTimeout(d.ctx, min(d.cfg.BarrierTimeout, d.cfg.LeaderLeaseTimeout))
		err := d.read(ctx)
		cancel()
		if err != nil {
			// Deliveries wait for their lease to commit until a read
			// passes; the next round or tick asks again.
			d.metrics.leaseRenewalsFailed.Inc()
			select {
			case <-time.After(d.cfg.RetryInterval):
			case <-d.stopc:
				return
			}
			continue
		}
		d.lease.confirmed(issued)
	}
}

// consumed answers whether any consumer is attached.
func (d *Dispatcher) consumed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.consumers) > 0
}
