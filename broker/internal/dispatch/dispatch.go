package dispatch

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/keys"
	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// ProposeFunc commits one command on the shard.
type ProposeFunc func(ctx context.Context, cmd *raftv1.Command) (*raftv1.Outcome, error)

// StartFunc proposes one command at once and returns a wait for its
// outcome; whatever is proposed after it returns is ordered after it.
type StartFunc func(ctx context.Context, cmd *raftv1.Command) (func() (*raftv1.Outcome, error), error)

// ReadIndexFunc confirms that this replica leads the shard (a ReadIndex
// answered by a quorum) and returns once the local state machine has applied
// every entry committed before the call. An error means nothing was
// confirmed; the dispatcher tries again.
type ReadIndexFunc func(ctx context.Context) error

// Config tunes a dispatcher.
type Config struct {
	// MaxLeaseBatch caps the copies leased in one round. Default 1024.
	MaxLeaseBatch int
	// DedupWindow is how long publish request ids are remembered. Default 10m.
	DedupWindow time.Duration
	// SweepInterval is how often old dedup records are dropped. Default 1m.
	SweepInterval time.Duration
	// RetryInterval is the pause after a failed lease proposal. Default 100ms.
	RetryInterval time.Duration
	// MaxLeasesInFlight bounds the lease proposals awaiting commit. Default 4.
	MaxLeasesInFlight int
	// MaxExpireBatch caps the messages one TTL expiry command removes.
	// Default 1000.
	MaxExpireBatch int
	// MaxSweepBatch caps the records one sweep command forgets; a sweep
	// repeats commands until none are left. Default 1024.
	MaxSweepBatch int
	// MaxCredit caps the deliveries one consumer may have on the broker:
	// picked for it and not yet settled plus buffered for it and not yet
	// taken, so a slow reader cannot make the broker buffer without bound
	// however much credit it grants. Credit beyond the room left is kept
	// (the proxy's count of it stays exact) and spent as the reader takes.
	// Default 10,000.
	MaxCredit int
	// Policy answers a topic's delivery policy; nil means no limits.
	Policy func(topic string) Policy
	// LeaderLeaseTimeout is how long after a confirmed read was issued
	// this replica counts on still leading the shard: no other replica
	// can be elected sooner than an election timeout after a quorum
	// answered it, so half an election timeout leaves room for clock
	// drift. Deliveries are pushed before their lease commits only while
	// this lease holds; otherwise after the commit. Zero (the default)
	// always waits for the commit. The host sets half its election
	// timeout.
	LeaderLeaseTimeout time.Duration
	// BarrierTimeout bounds one attempt of the read that a new leader
	// (and a lease renewal) waits for. Default 5s.
	BarrierTimeout time.Duration
}

// Policy is what the dispatcher needs of a topic's settings.
type Policy struct {
	// MaxAttempts: a copy delivered this many times goes to the dead-letter
	// topic instead of a further attempt; 0 means unlimited.
	MaxAttempts int32
	// ReleaseRate caps deliveries per second of the topic; 0 is unlimited.
	ReleaseRate float64
	// Fair topics serve due messages across fairness keys by weight.
	Fair    bool
	Weights map[string]int32
}

func (c *Config) fill() {
	if c.MaxLeaseBatch <= 0 {
		c.MaxLeaseBatch = 1024
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = 10 * time.Minute
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Minute
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 100 * time.Millisecond
	}
	if c.MaxLeasesInFlight <= 0 {
		c.MaxLeasesInFlight = 4
	}
	if c.MaxCredit <= 0 {
		c.MaxCredit = DefaultMaxCredit
	}
	if c.MaxExpireBatch <= 0 {
		c.MaxExpireBatch = 1000
	}
	if c.MaxSweepBatch <= 0 {
		c.MaxSweepBatch = 1024
	}
	if c.Policy == nil {
		c.Policy = func(string) Policy { return Policy{} }
	}
	if c.LeaderLeaseTimeout < 0 {
		c.LeaderLeaseTimeout = 0
	}
	if c.BarrierTimeout <= 0 {
		c.BarrierTimeout = 5 * time.Second
	}
}

// DefaultMaxCredit is Config.MaxCredit's default.
const DefaultMaxCredit = 10_000

// Dispatcher delivers one shard's due messages while its broker leads it.
type Dispatcher struct {
	shard   uint64
	db      *pebble.DB
	propose ProposeFunc
	start   StartFunc
	read    ReadIndexFunc
	now     func() time.Time
	cfg     Config
	log     *zap.Logger
	metrics *Metrics

	mu        sync.Mutex // guards consumers, rr, leasing, buckets, lateness, fair and prunedMs
	consumers []*Consumer
	rr        int
	// buckets, lateness and fair hold state only for topics and queues
	// that attached consumers read (see prune).
	buckets  map[string]*bucket      // release-rate limiters by topic
	lateness map[queueKey]*histogram // first-delivery lateness by topic and group
	fair     map[queueKey]*fairState
	prunedMs int64 // when prune last ran
	// leasing holds the copies (message id + group) whose lease proposal
	// has not been applied yet, so a round does not pick them twice. It is
	// bounded by MaxLeaseBatch × MaxLeasesInFlight.
	leasing map[string]struct{}

	floors *floors

	// nextExpiry is the earliest TTL expiry on the shard (0: none known,
	// -1: not read yet); owned by the loop, lowered through expiryLow.
	nextExpiry  int64
	expiryLow   atomic.Int64 // earliest expiry reported by the state machine
	expiryReset atomic.Bool  // the state was replaced: read the expiry again
	// expired names the messages whose due copies a round found expired
	// (copies leased when their TTL ended, which the TTL index no longer
	// holds); the next expiry command drops them. Owned by the loop.
	expired [][]byte

	fence *fence // changes a round must not push ahead of

	// caughtUp is closed once the barrier of this leadership passed: the
	// local state then holds everything committed before the term began.
	caughtUp chan struct{}
	lease    leaderLease
	renew    chan struct{} // cap 1: asks the renewer for a fresh lease

	ctx      context.Context // canceled by Stop; bounds lease proposals
	cancel   context.CancelFunc
	slots    chan struct{} // one per lease proposal in flight
	wake     chan struct{}
	stopc    chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup // the loop, the lease renewer and the lease committers
}

// New returns a dispatcher of shard; Start runs it. read is the barrier a
// new leader passes before its first scan (see ReadIndexFunc).
func New(shard uint64, db *pebble.DB, propose ProposeFunc, start StartFunc, read ReadIndexFunc, now func() time.Time, cfg Config, log *zap.Logger, m *Metrics) *Dispatcher {
	cfg.fill()
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Dispatcher{
		shard: shard, db: db, propose: propose, start: start, read: read, now: now, cfg: cfg, log: log, metrics: m,
		nextExpiry: -1,
		leasing:    map[string]struct{}{},
		buckets:    map[string]*bucket{},
		lateness:   map[queueKey]*histogram{},
		fair:       map[queueKey]*fairState{},
		floors:     newFloors(),
		fence:      newFence(),
		caughtUp:   make(chan struct{}),
		lease:      leaderLease{timeout: cfg.LeaderLeaseTimeout},
		renew:      make(chan struct{}, 1),
		ctx:        ctx, cancel: cancel,
		slots: make(chan struct{}, cfg.MaxLeasesInFlight),
		wake:  make(chan struct{}, 1), stopc: make(chan struct{}),
	}
}

// Start runs the loop and, with a LeaderLeaseTimeout, the lease renewer.
func (d *Dispatcher) Start() {
	d.wg.Add(1)
	go d.run()
	if d.cfg.LeaderLeaseTimeout > 0 {
		d.wg.Add(1)
		go d.renewLease()
	}
}

// Stop ends the loop, abandons lease proposals in flight and closes every
// consumer. Calls after the first return at once.
func (d *Dispatcher) Stop() {
	stopping := false
	d.stopOnce.Do(func() { stopping = true })
	if !stopping {
		return
	}
	close(d.stopc)
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.consumers {
		c.close()
	}
	d.consumers = nil
}

// Wake makes the loop look at the due index again.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// BeginChange is called before proposing a command that may remove, move or
// rewrite a due copy on a user's request (cancel, reschedule, a keyed
// REPLACE or DEBOUNCE publish); end is called once with the proposal's error
// when it returned.
func (d *Dispatcher) BeginChange() (end func(err error)) { return d.fence.begin() }

// Changed is the state machine's report of due-index insertions (lows: the
// earliest visible_at per queue) or of a wholesale reset; it lowers the scan
// floors and wakes the loop.
func (d *Dispatcher) Changed(lows map[keys.Queue]int64, expiryLow int64, reset bool) {
	for expiryLow > 0 {
		cur := d.expiryLow.Load()
		if (cur != 0 && cur <= expiryLow) || d.expiryLow.CompareAndSwap(cur, expiryLow) {
			break
		}
	}
	if reset {
		d.expiryReset.Store(true)
	}
	d.floors.lower(lows, reset)
	d.Wake()
}

// Attach adds a consumer.
func (d *Dispatcher) Attach(c *Consumer) {
	c.mu.Lock()
	c.wake = d.Wake
	c.mu.Unlock()
	d.mu.Lock()
	d.consumers = append(d.consumers, c)
	d.mu.Unlock()
	d.metrics.consumers.Inc()
	d.Wake()
}

// Detach removes a consumer; its leases run out normally.
func (d *Dispatcher) Detach(c *Consumer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i := slices.Index(d.consumers, c); i >= 0 {
		d.consumers = slices.Delete(d.consumers, i, i+1)
		d.metrics.consumers.Dec()
	}
	if left := c.close(); len(left) > 0 {
		d.release(left)
	}
}

// Revoke takes back up to n of c's unspent credit and answers how much.
func (d *Dispatcher) Revoke(c *Consumer, n int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	taken := max(0, min(n, c.credit))
	c.credit -= taken
	return taken
}

// AddCredit grants c n more deliveries; at most MaxCredit of them are on
// the broker at once.
func (d *Dispatcher) AddCredit(c *Consumer, n int) {
	d.mu.Lock()
	c.credit = min(c.credit+max(n, 0), math.MaxInt32)
	d.mu.Unlock()
	d.Wake()
}

func (d *Dispatcher) run() {
	defer d.wg.Done()
	if !d.catchUp() {
		return
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lastSweep := d.now()
	for {
		next := d.round()
		if at := d.expireDue(d.now()); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
		if now := d.now(); now.Sub(lastSweep) >= d.cfg.SweepInterval {
			d.sweep(now)
			lastSweep = now
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(max(time.Until(next), 0))
		} else {
			timer.Reset(d.cfg.SweepInterval)
		}
		select {
		case <-d.stopc:
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// queueKey groups consumers reading the same copies.
type queueKey struct{ topic, group string }

type pick struct {
	item     *raftv1.LeaseItem
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
	for _, p := range picks {
		if p.item.DeadLetter {
			ready = append(ready, p)
			continue
		}
		delivery, expiresAt, err := d.delivery(p)
		if err != nil {
			d.log.Error("read due message", zap.Uint64("shard_id", d.shard), zap.Error(err))
			unread = append(unread, p)
			continue
		}
		if expiresAt != 0 && expiresAt <= now.UnixMilli() {
			d.expired = append(d.expired, p.item.Ref.MessageId)
			unread = append(unread, p)
			continue
		}
		p.delivery = delivery
		ready = append(ready, p)
	}
	picks = ready
	d.settle(unread, make([]bool, len(unread)), nil)
	if len(picks) == 0 {
		<-d.slots
		return now.Add(d.cfg.RetryInterval)
	}
	pushed := make([]bool, len(picks))
	items := make([]*raftv1.LeaseItem, len(picks))
	for i, p := range picks {
		items[i] = p.item
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	wait, err := d.start(ctx, &raftv1.Command{Kind: &raftv1.Command_Lease{Lease: &raftv1.Lease{NowMs: now.UnixMilli(), Items: items}}})
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
	early := d.fence.clearSince(mark) && d.leaseHeld(d.now())
	if early {
		for i, p := range picks {
			if !p.item.Remove && !p.item.DeadLetter {
				pushed[i] = d.push(p)
			}
		}
	}
	d.wg.Add(1)
	go d.commit(picks, pushed, early, wait, cancel)
	return now // more may be due: look again at once
}

// commit waits for the lease of picks, pushes the at-most-once ones that
// committed (and the at-least-once ones, unless pushed early) and releases
// the copies for later rounds.
func (d *Dispatcher) commit(picks []pick, pushed []bool, early bool, wait func() (*raftv1.Outcome, error), cancel context.CancelFunc) {
	defer d.wg.Done()
	defer func() { <-d.slots }()
	out, err := wait()
	cancel()
	if err == nil && len(out.GetCodes()) != len(picks) {
		err = errors.New("dispatch: lease outcome does not match the items")
	}
	if err != nil {
		d.leaseFailed(picks, pushed, err)
		return
	}
	for i, p := range picks {
		switch {
		case p.item.DeadLetter && out.Codes[i] == raftv1.RefCode_REF_CODE_OK:
			d.metrics.deadLettered.Inc()
		case (p.item.Remove || !early) && !p.item.DeadLetter && out.Codes[i] == raftv1.RefCode_REF_CODE_OK:
			pushed[i] = d.push(p)
			if !p.item.Remove {
				d.metrics.pushedAfterCommit.Inc()
			}
		}
	}
	d.settle(picks, pushed, out.Codes)
	d.Wake()
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
}

// push hands a picked copy's delivery to its consumer. A consumer that went
// away meanwhile gets nothing: its copy is given back at once.
func (d *Dispatcher) push(p pick) bool {
	if !p.consumer.push(p.delivery) {
		d.release([]*sundialv1.Delivery{p.delivery})
		return true // the credit went with the consumer
	}
	// Lateness is taken at the push itself, not at the round's start.
	pushedAt := d.now()
	d.metrics.delivered(pushedAt, p.delivery.DueAtUnixMs, uint32(p.delivery.Attempt))
	if p.delivery.Attempt == 1 {
		d.observeLateness(queueKey{p.q.Topic, p.q.Group}, pushedAt.UnixMilli(), pushedAt.UnixMilli()-p.delivery.DueAtUnixMs)
	}
	return true
}

// settle releases picks for later rounds and refunds the credit of those
// not pushed. codes (nil when the proposal failed) counts lease conflicts.
func (d *Dispatcher) settle(picks []pick, pushed []bool, codes []raftv1.RefCode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, p := range picks {
		delete(d.leasing, leasingKey(p.item.Ref))
		if p.consumer != nil {
			p.consumer.picked--
			if !pushed[i] {
				p.consumer.credit++
			}
		}
		if codes != nil && codes[i] != raftv1.RefCode_REF_CODE_OK && pushed[i] {
			d.metrics.leaseConflicts.Inc()
		}
	}
}

func leasingKey(ref *raftv1.MessageRef) string {
	return string(ref.MessageId) + ref.Group
}

// pickDue scans the due index of every queue with credit and assigns each
// due copy to a consumer, spending credit.
func (d *Dispatcher) pickDue(nowMs int64) ([]pick, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	byQueue := map[queueKey][]*Consumer{}
	var order []queueKey
	for _, c := range d.consumers {
		k := queueKey{c.Topic, c.Group}
		if _, ok := byQueue[k]; !ok {
			order = append(order, k)
		}
		byQueue[k] = append(byQueue[k], c)
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
		allowed, refill := d.allowance(k.topic, policy.ReleaseRate, nowMs)
		if !refill.IsZero() && (next.IsZero() || refill.Before(next)) {
			next = refill
		}
		credit = min(credit, allowed)
		for _, part := range sortedKeys(parts) {
			q := keys.Queue{Topic: k.topic, Partition: part, Group: k.group}
			limit := min(credit, d.cfg.MaxLeaseBatch-len(picks))
			if limit <= 0 {
				if credit > 0 {
					return picks, time.UnixMilli(nowMs)
				}
				break
			}
			scan := d.scan
			if policy.Fair {
				scan = func(q keys.Queue, nowMs int64, limit int) ([]dueItem, time.Time, error) {
					return d.scanFair(q, nowMs, limit, policy.Weights)
				}
			}
			due, wakeAt, err := scan(q, nowMs, limit)
			if err != nil {
				d.log.Error("scan due index", zap.Uint64("shard_id", d.shard), zap.Error(err))
				continue
			}
			for _, e := range due {
				d.leasing[leasingKey(e.item.Ref)] = struct{}{}
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
				d.spend(k.topic, policy.ReleaseRate)
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

type dueItem struct{ item *raftv1.LeaseItem }

// dueItem turns the index entry e of q under it into a lease candidate;
// busy when its lease is already being proposed. The caller holds mu.
func (d *Dispatcher) dueItem(it *pebble.Iterator, q keys.Queue, e keys.DueEntry) (dueItem, bool, error) {
	if _, busy := d.leasing[string(e.ID)+q.Group]; busy {
		return dueItem{}, true, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return dueItem{}, false, err
	}
	attempt, _, err := keys.ParseDueValue(v)
	if err != nil {
		return dueItem{}, false, err
	}
	return dueItem{item: &raftv1.LeaseItem{
		Ref:         &raftv1.MessageRef{MessageId: slices.Clone(e.ID), Group: q.Group, Attempt: attempt},
		VisibleAtMs: e.VisibleAtMs,
	}}, false, nil
}

// scan returns up to limit copies of q visible at or before nowMs that are
// not being leased already, and when to look again: now if it stopped at
// the limit, else the visible_at of the first later copy (zero if none).
// It starts at q's floor and leaves the floor at the first entry it saw.
// Entries between the floor and the first entry it saw were deleted (their
// leases committed) or are being leased; a lease that fails or conflicts
// leaves its copy at its key, which is at or after the floor.
// The caller holds mu.
func (d *Dispatcher) scan(q keys.Queue, nowMs int64, limit int) (out []dueItem, wakeAt time.Time, err error) {
	prefix := keys.QueuePrefix(d.shard, q)
	lower := prefix
	if f, ok := d.floors.begin(q); ok {
		lower = f.key
		if lower == nil {
			lower = keys.DueFrom(d.shard, q, f.ms)
		}
	}
	first := floor{ms: nowMs} // for an empty queue: every later insertion lowers the floor
	seen := false
	defer func() { d.floors.end(q, first, err == nil) }()
	note := func(visibleAtMs int64, key []byte) {
		if !seen {
			first, seen = floor{ms: visibleAtMs, key: slices.Clone(key)}, true
		}
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer it.Close()
	until := keys.DueUntil(d.shard, q, nowMs)
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		if string(it.Key()) >= string(until) {
			break
		}
		e, err := keys.ParseDue(d.shard, q, it.Key())
		if err != nil {
			return nil, time.Time{}, err
		}
		note(e.VisibleAtMs, it.Key())
		item, busy, err := d.dueItem(it, q, e)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !busy {
			out = append(out, item)
		}
	}
	if len(out) == limit {
		wakeAt = time.UnixMilli(nowMs)
	} else if it.SeekGE(until) {
		if e, err := keys.ParseDue(d.shard, q, it.Key()); err == nil {
			wakeAt = time.UnixMilli(e.VisibleAtMs)
			note(e.VisibleAtMs, it.Key())
		}
	}
	return out, wakeAt, it.Error()
}

// delivery reads the body of p's message and returns its delivery and TTL
// expiry. It stamps p's lease item with the body's content version: the
// payload and the version come from one read, so the lease commits exactly
// when the payload pushed is still the message's current contents.
func (d *Dispatcher) delivery(p pick) (*sundialv1.Delivery, int64, error) {
	id, err := receipt.MessageIDFromBytes(p.item.Ref.MessageId)
	if err != nil {
		return nil, 0, err
	}
	v, closer, err := d.db.Get(keys.Message(d.shard, id[:]))
	if err != nil {
		return nil, 0, err
	}
	var m raftv1.StoredMessage
	err = proto.Unmarshal(v, &m)
	closer.Close()
	if err != nil {
		return nil, 0, err
	}
	p.item.Version = m.Version
	attempt := p.item.Ref.Attempt + 1
	return &sundialv1.Delivery{
		MessageId:           id.String(),
		Receipt:             receipt.Receipt{Message: id, Group: p.q.Group, Attempt: attempt}.String(),
		Topic:               m.Topic,
		Payload:             m.Payload,
		Headers:             m.Headers,
		Attempt:             int32(attempt),
		PublishedAtUnixMs:   m.PublishedAtMs,
		DueAtUnixMs:         m.DueAtMs,
		FairnessKey:         m.FairnessKey,
		Key:                 m.Key,
		Group:               p.q.Group,
		LeaseDeadlineUnixMs: p.item.DeadlineMs,
	}, m.ExpiresAtMs, nil
}

// sweep forgets the shard's publish dedup records older than the dedup
// window and the key and end records whose time came, one bounded command
// after another until a command answers that nothing is left.
func (d *Dispatcher) sweep(now time.Time) {
	sw := &raftv1.Sweep{BeforeMs: now.Add(-d.cfg.DedupWindow).UnixMilli(), NowMs: now.UnixMilli(), Limit: uint32(d.cfg.MaxSweepBatch)}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := d.propose(ctx, &raftv1.Command{Kind: &raftv1.Command_Sweep{Sweep: sw}})
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

func sortedKeys(m map[uint32]bool) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
