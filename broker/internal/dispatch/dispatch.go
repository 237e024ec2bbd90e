package dispatch

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync"
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
}

// Dispatcher delivers one shard's due messages while its broker leads it.
type Dispatcher struct {
	shard   uint64
	db      *pebble.DB
	propose ProposeFunc
	now     func() time.Time
	cfg     Config
	log     *zap.Logger
	metrics *Metrics

	mu        sync.Mutex // guards consumers and rr
	consumers []*Consumer
	rr        int

	wake  chan struct{}
	stopc chan struct{}
	wg    sync.WaitGroup
}

// New returns a dispatcher of shard; Start runs it.
func New(shard uint64, db *pebble.DB, propose ProposeFunc, now func() time.Time, cfg Config, log *zap.Logger, m *Metrics) *Dispatcher {
	cfg.fill()
	if now == nil {
		now = time.Now
	}
	return &Dispatcher{
		shard: shard, db: db, propose: propose, now: now, cfg: cfg, log: log, metrics: m,
		wake: make(chan struct{}, 1), stopc: make(chan struct{}),
	}
}

// Start runs the loop.
func (d *Dispatcher) Start() {
	d.wg.Add(1)
	go d.run()
}

// Stop ends the loop and closes every consumer.
func (d *Dispatcher) Stop() {
	close(d.stopc)
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

// Attach adds a consumer.
func (d *Dispatcher) Attach(c *Consumer) {
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
	c.close()
}

// AddCredit grants c n more deliveries.
func (d *Dispatcher) AddCredit(c *Consumer, n int) {
	d.mu.Lock()
	c.credit = min(c.credit+n, math.MaxInt32)
	d.mu.Unlock()
	d.Wake()
}

func (d *Dispatcher) run() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lastSweep := d.now()
	for {
		next := d.round()
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
}

// round leases and pushes what is due now, and returns when to look again
// (zero: only when woken).
func (d *Dispatcher) round() time.Time {
	now := d.now()
	nowMs := now.UnixMilli()
	picks, next := d.pickDue(nowMs)
	if len(picks) == 0 {
		return next
	}
	items := make([]*raftv1.LeaseItem, len(picks))
	for i, p := range picks {
		items[i] = p.item
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, err := d.propose(ctx, &raftv1.Command{Kind: &raftv1.Command_Lease{Lease: &raftv1.Lease{NowMs: nowMs, Items: items}}})
	cancel()
	if err != nil || len(out.GetCodes()) != len(picks) {
		d.log.Warn("lease proposal failed", zap.Uint64("shard_id", d.shard), zap.Int("copies", len(picks)), zap.Error(err))
		d.refund(picks)
		return now.Add(d.cfg.RetryInterval)
	}
	var unused []pick
	for i, p := range picks {
		if out.Codes[i] != raftv1.RefCode_REF_CODE_OK {
			unused = append(unused, p)
			continue
		}
		delivery, err := d.delivery(p, now)
		if err != nil {
			d.log.Error("read leased message", zap.Uint64("shard_id", d.shard), zap.Error(err))
			unused = append(unused, p)
			continue
		}
		p.consumer.push(delivery)
	}
	d.refund(unused)
	return now // more may be due: look again at once
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
	var picks []pick
	var next time.Time
	for _, k := range order {
		cs := byQueue[k]
		credit := 0
		parts := map[uint32]bool{}
		for _, c := range cs {
			credit += c.credit
			for _, p := range c.Partitions {
				parts[p] = true
			}
		}
		if credit == 0 {
			continue
		}
		for _, part := range sortedKeys(parts) {
			q := keys.Queue{Topic: k.topic, Partition: part, Group: k.group}
			limit := min(credit, d.cfg.MaxLeaseBatch-len(picks))
			if limit <= 0 {
				return picks, time.UnixMilli(nowMs)
			}
			due, wakeAt, err := d.scan(q, nowMs, limit)
			if err != nil {
				d.log.Error("scan due index", zap.Uint64("shard_id", d.shard), zap.Error(err))
				continue
			}
			for _, e := range due {
				c := d.nextConsumer(cs, part)
				c.credit--
				credit--
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

// nextConsumer picks, round-robin, a consumer with credit reading part.
func (d *Dispatcher) nextConsumer(cs []*Consumer, part uint32) *Consumer {
	for range cs {
		d.rr++
		c := cs[d.rr%len(cs)]
		if c.credit > 0 && slices.Contains(c.Partitions, part) {
			return c
		}
	}
	return cs[0] // unreachable: the caller checked credit
}

type dueItem struct{ item *raftv1.LeaseItem }

// scan returns up to limit copies of q visible at or before nowMs, and the
// visible_at of the first later copy (zero if none).
func (d *Dispatcher) scan(q keys.Queue, nowMs int64, limit int) ([]dueItem, time.Time, error) {
	prefix := keys.QueuePrefix(d.shard, q)
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer it.Close()
	until := keys.DueUntil(d.shard, q, nowMs)
	var out []dueItem
	valid := it.First()
	for ; valid && len(out) < limit; valid = it.Next() {
		if string(it.Key()) >= string(until) {
			break
		}
		e, err := keys.ParseDue(d.shard, q, it.Key())
		if err != nil {
			return nil, time.Time{}, err
		}
		v, err := it.ValueAndErr()
		if err != nil || len(v) != 4 {
			return nil, time.Time{}, errors.Join(err, keys.ErrMalformed)
		}
		out = append(out, dueItem{item: &raftv1.LeaseItem{
			Ref:         &raftv1.MessageRef{MessageId: slices.Clone(e.ID), Group: q.Group, Attempt: binary.BigEndian.Uint32(v)},
			VisibleAtMs: e.VisibleAtMs,
		}})
	}
	var wakeAt time.Time
	if len(out) == limit {
		wakeAt = time.UnixMilli(nowMs)
	} else if it.SeekGE(until) {
		if e, err := keys.ParseDue(d.shard, q, it.Key()); err == nil {
			wakeAt = time.UnixMilli(e.VisibleAtMs)
		}
	}
	return out, wakeAt, it.Error()
}

func (d *Dispatcher) delivery(p pick, now time.Time) (*sundialv1.Delivery, error) {
	id, err := receipt.MessageIDFromBytes(p.item.Ref.MessageId)
	if err != nil {
		return nil, err
	}
	v, closer, err := d.db.Get(keys.Message(d.shard, id[:]))
	if err != nil {
		return nil, err
	}
	var m raftv1.StoredMessage
	err = proto.Unmarshal(v, &m)
	closer.Close()
	if err != nil {
		return nil, err
	}
	attempt := p.item.Ref.Attempt + 1
	d.metrics.delivered(now, m.DueAtMs, attempt)
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
	}, nil
}

// refund gives back the credit of picks that were not delivered.
func (d *Dispatcher) refund(picks []pick) {
	if len(picks) == 0 {
		return
	}
	d.mu.Lock()
	for _, p := range picks {
		p.consumer.credit++
	}
	d.mu.Unlock()
}

func (d *Dispatcher) sweep(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := now.Add(-d.cfg.DedupWindow).UnixMilli()
	if _, err := d.propose(ctx, &raftv1.Command{Kind: &raftv1.Command_Sweep{Sweep: &raftv1.Sweep{BeforeMs: before}}}); err != nil {
		d.log.Warn("dedup sweep failed", zap.Uint64("shard_id", d.shard), zap.Error(err))
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
