package dispatch

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// ProposeFunc commits one command on the shard.
type ProposeFunc func(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Outcome, error)

// StartFunc proposes one command at once and returns a wait for its
// outcome; whatever is proposed after it returns is ordered after it.
type StartFunc func(ctx context.Context, cmd *fsmpb.Command) (func() (*fsmpb.Outcome, error), error)

// ReadIndexFunc confirms that this replica leads the shard (a ReadIndex
// answered by a quorum) and returns once the local state machine has applied
// every entry committed before the call. An error means nothing was
// confirmed; the dispatcher tries again.
type ReadIndexFunc func(ctx context.Context) error

// Config tunes a dispatcher.
type Config struct {
	// MaxLeaseBatch caps the copies leased in one round. Default 1024.
	MaxLeaseBatch int
	// DedupWindow is how long publish and change request ids are
	// remembered. Default 10m.
	DedupWindow time.Duration
	// SweepInterval is how often the leader looks for dedup, key and end
	// records whose time came and forgets them: each is forgotten at most
	// SweepInterval after it, however far off the next delivery is. A look
	// that finds nothing proposes nothing. Default 1m.
	SweepInterval time.Duration
	// RetryInterval is the pause after a failed lease proposal. Default 100ms.
	RetryInterval time.Duration
	// MaxLeasesInFlight bounds the lease proposals awaiting commit. Default 4.
	MaxLeasesInFlight int
	// MaxExpireBatch caps the messages one TTL expiry command removes.
	// Default 1000.
	MaxExpireBatch int
	// MaxSweepBatch caps the records (dedup, key and end records, each
	// counted) one sweep command forgets; a sweep repeats commands until
	// none are left. Default 1024.
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
	// ReleaseRate caps deliveries per second of the topic, over all its
	// partitions; 0 is unlimited. A shard uses its share (shardRate).
	ReleaseRate float64
	// Partitions is the topic's partition count, which the share of
	// ReleaseRate is taken of; 0 means 1.
	Partitions uint32
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

// notArmed is armedMs while the loop runs a round or sleeps until woken:
// every insertion nudges it.
const notArmed = math.MaxInt64

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

	// mu guards the consumers (with their credit, picked and room), rr,
	// turn, leasing and prunedMs, and the limiter and fair scheduler, which only
	// rounds touch. A round holds it while it picks, never while it
	// proposes or pushes. See the package doc for the lock order.
	mu        sync.Mutex
	consumers []*Consumer
	rr        int // round-robin position among a queue's consumers
	turn      int // queues served so far: which partition of a queue goes first
	// leasing holds the copies (message id + group) whose lease proposal
	// has not been answered yet, so a round does not pick them twice. It is
	// bounded by MaxLeaseBatch × MaxLeasesInFlight.
	leasing  leasingSet
	prunedMs int64 // when prune last ran
	// limiter, fair and lateness hold state only for topics and queues
	// that attached consumers read (see prune).
	limiter  *limiter
	fair     *fairScheduler
	lateness *lateness // its own lock

	floors   *floors      // scan floors; its own lock
	horizons *floors      // where FAIR queues' catch-ups stopped; its own lock
	index    *dueIndex    // the loop's reads of the store
	fence    *fence       // changes a round must not push ahead of; atomics
	ttl      *ttlTimer    // when the next TTL expiry command is due; the loop's
	lease    *leaderLease // its own lock

	// caughtUp is closed once the barrier of this leadership passed: the
	// local state then holds everything committed before the term began.
	caughtUp chan struct{}

	ctx    context.Context // canceled by Stop; bounds lease proposals
	cancel context.CancelFunc
	slots  chan struct{} // one per lease proposal in flight
	wake   chan struct{} // a round is needed now
	// rearm nudges the sleeping loop to take dueMs, the earliest
	// visible_at (unix ms) inserted since it last looked (MaxInt64: none),
	// and fire its timer no later. armedMs is when the timer fires
	// (notArmed while a round runs or nothing is due): an insertion due at
	// or after it needs no nudge, the round at the timer sees it.
	rearm    chan struct{}
	dueMs    atomic.Int64
	armedMs  atomic.Int64
	stopc    chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup // the loop, the lease renewer, the lease committers and releases
}

// New returns a dispatcher of shard; Start runs it. read is the barrier a
// new leader passes before its first scan (see ReadIndexFunc).
func New(shard uint64, db *pebble.DB, propose ProposeFunc, start StartFunc, read ReadIndexFunc, now func() time.Time, cfg Config, log *zap.Logger, m *Metrics) *Dispatcher {
	cfg.fill()
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		shard: shard, db: db, propose: propose, start: start, read: read, now: now, cfg: cfg, log: log, metrics: m,
		leasing:  leasingSet{},
		limiter:  newLimiter(),
		lateness: newLateness(),
		fair:     newFairScheduler(),
		floors:   newFloors(),
		horizons: newFloors(),
		fence:    newFence(),
		caughtUp: make(chan struct{}),
		lease:    newLeaderLease(cfg.LeaderLeaseTimeout),
		ctx:      ctx, cancel: cancel,
		slots: make(chan struct{}, cfg.MaxLeasesInFlight),
		wake:  make(chan struct{}, 1), rearm: make(chan struct{}, 1), stopc: make(chan struct{}),
	}
	d.armedMs.Store(notArmed)
	d.dueMs.Store(math.MaxInt64)
	d.index = &dueIndex{shard: shard, db: db, floors: d.floors, horizons: d.horizons, rebuilt: m.fairRebuilds.Inc}
	d.ttl = newTTLTimer(d.index.firstExpiry)
	return d
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
// floors and FAIR queues' horizons. A reset wakes the loop for a round. An
// insertion only makes sure the loop's timer fires no later than it is due
// (a publish due in 2 s, a lease's deadline 30 s out): the round then scans
// from the lowered floors; a round now would find nothing due.
func (d *Dispatcher) Changed(lows map[keys.Queue]int64, expiryLow int64, reset bool) {
	d.ttl.lower(expiryLow, reset)
	d.floors.lower(lows, reset)
	d.horizons.lower(lows, reset)
	if reset {
		d.Wake()
		return
	}
	earliest := int64(math.MaxInt64)
	if expiryLow != 0 {
		earliest = expiryLow
	}
	for _, low := range lows {
		earliest = min(earliest, low)
	}
	for {
		cur := d.dueMs.Load()
		if earliest >= cur || d.dueMs.CompareAndSwap(cur, earliest) {
			break
		}
	}
	// Read after dueMs was lowered: a loop that armed its timer before
	// that either fires first or is nudged and takes dueMs.
	if earliest < d.armedMs.Load() {
		select {
		case d.rearm <- struct{}{}:
		default:
		}
	}
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

// Lateness answers the p50 and p99 first-delivery lateness (ms, bucket
// upper bounds) of a topic's group since this dispatcher started; a group
// nobody read for latenessIdle starts again from nothing.
func (d *Dispatcher) Lateness(topic, group string) (p50, p99 float64) {
	return d.lateness.quantiles(queueKey{topic, group})
}

func (d *Dispatcher) run() {
	defer d.wg.Done()
	if !d.catchUp() {
		return
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	nextSweep := d.now().Add(d.cfg.SweepInterval)
	for {
		d.armedMs.Store(notArmed)
		next := d.round()
		if at := d.expireDue(d.now()); !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
		if now := d.now(); !now.Before(nextSweep) {
			d.sweep(now)
			nextSweep = now.Add(d.cfg.SweepInterval)
		}
		// The loop wakes for the next sweep however far off the next
		// delivery, lease deadline or expiry is, so records are forgotten
		// within SweepInterval of their time. A sweep with nothing to
		// forget proposes nothing (see sweep).
		if next.IsZero() || nextSweep.Before(next) {
			next = nextSweep
		}
		if !d.sleep(timer, next) {
			return
		}
	}
}

// sleep waits until next, woken by Wake, or until the earliest insertion
// Changed reports, whichever comes first; false when the dispatcher stops.
// An insertion due later than the timer costs no round.
func (d *Dispatcher) sleep(timer *time.Timer, next time.Time) bool {
	for {
		if due := d.dueMs.Swap(math.MaxInt64); due != math.MaxInt64 && due < next.UnixMilli() {
			next = time.UnixMilli(due)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(time.Until(next), 0))
		d.armedMs.Store(next.UnixMilli())
		select {
		case <-d.stopc:
			return false
		case <-d.wake:
			return true
		case <-timer.C:
			return true
		case <-d.rearm:
		}
	}
}
