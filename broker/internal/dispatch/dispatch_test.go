package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

const shard = 100

// shardLog applies commands to the real state machine in order, standing in
// for a single-replica Raft log: the dispatcher's timing and scanning logic
// runs against the real due index without replication.
type shardLog struct {
	t     *testing.T
	mu    sync.Mutex
	s     *fsm.StateMachine
	index uint64
	// beforeLease, when set, runs before a lease is appended: a command it
	// proposes is ordered ahead of the lease, as a racing one may be.
	beforeLease func()
	// leaseGate, when set, holds every lease's commit until it is closed.
	leaseGate chan struct{}
	// answerGate, when set, applies every lease at once but holds the
	// answer to its proposer until it is closed: a lease applied, and
	// commands after it too, before the dispatcher hears it committed.
	answerGate chan struct{}
	// read, when set, is the leader's ReadIndex; nil passes at once.
	read ReadIndexFunc
	// failLeases is how many of the next leases answer an error without
	// being applied, as a proposal Dragonboat dropped.
	failLeases int
	// leases counts the lease commands started.
	leases atomic.Int32
}

func (l *shardLog) readIndex(ctx context.Context) error {
	if l.read != nil {
		return l.read(ctx)
	}
	return nil
}

func (l *shardLog) propose(_ context.Context, cmd *fsmpb.Command) (*fsmpb.Outcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	data, err := proto.Marshal(&fsmpb.Batch{Commands: []*fsmpb.Command{cmd}})
	if err != nil {
		return nil, err
	}
	out, err := l.s.Update([]sm.Entry{{Index: l.index, Cmd: data}})
	if err != nil {
		return nil, err
	}
	var outs fsmpb.Outcomes
	if err := proto.Unmarshal(out[0].Result.Data, &outs); err != nil {
		return nil, err
	}
	return outs.Outcomes[0], nil
}

func (l *shardLog) start(ctx context.Context, cmd *fsmpb.Command) (func() (*fsmpb.Outcome, error), error) {
	if cmd.GetLease() != nil {
		l.leases.Add(1)
	}
	if cmd.GetLease() != nil && l.beforeLease != nil {
		l.beforeLease()
	}
	if cmd.GetLease() != nil && l.dropLease() {
		return func() (*fsmpb.Outcome, error) { return nil, errors.New("request dropped") }, nil
	}
	if cmd.GetLease() != nil && l.leaseGate != nil {
		return func() (*fsmpb.Outcome, error) {
			select {
			case <-l.leaseGate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return l.propose(ctx, cmd)
		}, nil
	}
	out, err := l.propose(ctx, cmd)
	if cmd.GetLease() != nil && l.answerGate != nil {
		return func() (*fsmpb.Outcome, error) {
			select {
			case <-l.answerGate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return out, err
		}, nil
	}
	return func() (*fsmpb.Outcome, error) { return out, err }, nil
}

// dropLease answers whether the lease being started fails (failLeases).
func (l *shardLog) dropLease() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failLeases == 0 {
		return false
	}
	l.failLeases--
	return true
}

type rig struct {
	t   *testing.T
	log *shardLog
	d   *Dispatcher
}

func newRig(t *testing.T) *rig {
	return newRigWith(t, Config{})
}

func newRigWith(t *testing.T, cfg Config) *rig {
	return newRigLog(t, cfg, &shardLog{})
}

// newRigLog starts a dispatcher over log, whose hooks are set already.
// Unless cfg says otherwise, the rig's leader holds its leader lease.
func newRigLog(t *testing.T, cfg Config, log *shardLog) *rig {
	if cfg.LeaderLeaseTimeout == 0 {
		cfg.LeaderLeaseTimeout = time.Hour
	}
	r := &rig{t: t}
	r.log = log
	r.log.t = t
	var db *pebble.DB
	r.log.s, db = memStateMachine(t, &r.d)
	r.d = New(shard, db, r.log.propose, r.log.start, r.log.readIndex, time.Now, cfg, zaptest.NewLogger(t), NewMetrics(prometheus.NewRegistry()))
	r.d.Start()
	t.Cleanup(r.d.Stop)
	return r
}

// publish stores messages due at the given times (absolute ms).
func (r *rig) publish(topic string, dues ...int64) []receipt.MessageID {
	r.t.Helper()
	var msgs []*fsmpb.StoredMessage
	for _, due := range dues {
		msgs = append(msgs, &fsmpb.StoredMessage{Topic: topic, Payload: []byte(fmt.Sprint(due)), DueAtMs: due})
	}
	return r.publishMessages(msgs...)
}

func (r *rig) publishMessages(msgs ...*fsmpb.StoredMessage) []receipt.MessageID {
	r.t.Helper()
	p := &fsmpb.Publish{NowMs: time.Now().UnixMilli(), Messages: msgs}
	out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
	if err != nil {
		r.t.Fatalf("publish: %v", err)
	}
	var ids []receipt.MessageID
	for _, o := range out.Published {
		id, _ := receipt.MessageIDFromBytes(o.MessageId)
		ids = append(ids, id)
	}
	return ids
}

func (r *rig) ack(d *sundialv1.Delivery) fsmpb.RefCode {
	r.t.Helper()
	rc, err := receipt.Parse(d.Receipt)
	if err != nil {
		r.t.Fatalf("receipt.Parse() error = %v", err)
	}
	out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: []*fsmpb.MessageRef{{MessageId: rc.Message[:], Group: rc.Group, Attempt: rc.Attempt}}}}})
	if err != nil {
		r.t.Fatalf("ack: %v", err)
	}
	return out.Codes[0]
}

// nack gives d back, visible again delayMs from now.
func (r *rig) nack(d *sundialv1.Delivery, delayMs int64) fsmpb.RefCode {
	r.t.Helper()
	rc, err := receipt.Parse(d.Receipt)
	if err != nil {
		r.t.Fatalf("receipt.Parse() error = %v", err)
	}
	ref := &fsmpb.MessageRef{MessageId: rc.Message[:], Group: rc.Group, Attempt: rc.Attempt}
	nack := &fsmpb.Nack{Refs: []*fsmpb.MessageRef{ref}, VisibleAtMs: time.Now().UnixMilli() + delayMs}
	out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Nack{Nack: nack}})
	if err != nil {
		r.t.Fatalf("nack: %v", err)
	}
	return out.Codes[0]
}

type got struct {
	d  *sundialv1.Delivery
	at time.Time
}

// next waits for the consumer's next delivery.
func next(c *Consumer, timeout time.Duration) (got, bool) {
	deadline := time.After(timeout)
	for {
		if ds := c.Take(); len(ds) > 0 {
			for _, d := range ds[1:] {
				c.push(d) // keep the rest for later calls
			}
			return got{ds[0], time.Now()}, true
		}
		select {
		case <-c.Ready():
		case <-deadline:
			return got{}, false
		}
	}
}

func TestDeliversInDueOrderNeverEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		now := time.Now().UnixMilli()
		r.publish("t", now+120, now+40, now+80)
		var dues []int64
		for range 3 {
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("only %d of 3 delivered", len(dues))
			}
			if g.at.UnixMilli() < g.d.DueAtUnixMs {
				t.Fatalf("delivered at %d, before due %d", g.at.UnixMilli(), g.d.DueAtUnixMs)
			}
			dues = append(dues, g.d.DueAtUnixMs-now)
		}
		if fmt.Sprint(dues) != "[40 80 120]" {
			t.Fatalf("delivered due offsets %v, want [40 80 120]", dues)
		}
	})
}

func TestCreditBoundsDeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 2)
		r.d.Attach(c)
		now := time.Now().UnixMilli()
		r.publish("t", now, now, now, now, now)
		for range 2 {
			if _, ok := next(c, 5*time.Second); !ok {
				t.Fatalf("credited delivery missing")
			}
		}
		if g, ok := next(c, 300*time.Millisecond); ok {
			t.Fatalf("delivered %v beyond the credit of 2", g.d.MessageId)
		}
		r.d.AddCredit(c, 3)
		for range 3 {
			if _, ok := next(c, 5*time.Second); !ok {
				t.Fatalf("delivery after more credit missing")
			}
		}
	})
}

// After scans walked past acked messages (raising the floor), a message
// published due earlier than everything still waiting must be found.
func TestInsertBelowFloorIsDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 100)
		r.d.Attach(c)
		now := time.Now().UnixMilli()
		r.publish("t", now+3_600_000) // waits an hour: the floor rises to it
		for i := range 20 {
			r.publish("t", now+int64(i))
		}
		for range 20 {
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("due message missing")
			}
			if code := r.ack(g.d); code != fsmpb.RefCode_REF_CODE_OK {
				t.Fatalf("ack = %v", code)
			}
		}
		synctest.Wait() // every round has run: the floor sits at the hour mark
		r.publish("t", time.Now().UnixMilli()+20)
		if _, ok := next(c, 5*time.Second); !ok {
			t.Fatalf("message due below the scan floor was never delivered")
		}
	})
}

func TestAtMostOnceRemovesOnDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, true, 10)
		r.d.Attach(c)
		r.publish("t", time.Now().UnixMilli())
		g, ok := next(c, 5*time.Second)
		if !ok {
			t.Fatalf("no delivery")
		}
		if code := r.ack(g.d); code != fsmpb.RefCode_REF_CODE_NOT_FOUND {
			t.Fatalf("ack after an at-most-once delivery = %v, want NOT_FOUND: the delivery removed it", code)
		}
	})
}

func TestExpiredLeaseIsRedelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, 100*time.Millisecond, false, 10)
		r.d.Attach(c)
		r.publish("t", time.Now().UnixMilli())
		first, ok := next(c, 5*time.Second)
		if !ok {
			t.Fatalf("no delivery")
		}
		second, ok := next(c, 5*time.Second)
		if !ok || second.d.Attempt != 2 || second.d.MessageId != first.d.MessageId {
			t.Fatalf("redelivery = %v, %v, want attempt 2 of %s", second.d, ok, first.d.MessageId)
		}
		// Measured against the first lease's deadline, not against when the
		// test happened to see the first delivery.
		if at, deadline := second.at.UnixMilli(), first.d.LeaseDeadlineUnixMs; at < deadline {
			t.Fatalf("redelivered at %d, before the first lease ended at %d", at, deadline)
		}
	})
}

type quiet struct{}

func (quiet) Infof(string, ...interface{})  {}
func (quiet) Errorf(string, ...interface{}) {}
func (quiet) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{Policy: func(topic string) Policy {
			if topic == "t" {
				return Policy{MaxAttempts: 2}
			}
			return Policy{}
		}})
		c := NewConsumer("t", "default", []uint32{0}, 50*time.Millisecond, false, 10)
		r.d.Attach(c)
		dlq := NewConsumer("t.dlq", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(dlq)
		r.publish("t", time.Now().UnixMilli())
		for attempt := int32(1); attempt <= 2; attempt++ {
			g, ok := next(c, 5*time.Second)
			if !ok || g.d.Attempt != attempt {
				t.Fatalf("attempt %d = %v, %v", attempt, g.d, ok)
			}
		}
		dead, ok := next(dlq, 5*time.Second)
		if !ok || dead.d.Headers["sundial-original-topic"] != "t" || dead.d.Headers["sundial-attempts"] != "2" {
			t.Fatalf("dead letter = %v, %v, want one from t after 2 attempts", dead.d, ok)
		}
		if g, ok := next(c, 200*time.Millisecond); ok {
			t.Fatalf("a third attempt was delivered: %v", g.d)
		}
	})
}

func TestExpiredMessageIsNeverDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		now := time.Now().UnixMilli()
		r.publishMessages(
			&fsmpb.StoredMessage{Topic: "t", Payload: []byte("stale"), DueAtMs: now - 100, ExpiresAtMs: now - 50},
			&fsmpb.StoredMessage{Topic: "t", Payload: []byte("fresh"), DueAtMs: now, ExpiresAtMs: now + 60_000},
		)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		g, ok := next(c, 5*time.Second)
		if !ok || string(g.d.Payload) != "fresh" {
			t.Fatalf("delivery = %v, %v, want only the fresh message", g.d, ok)
		}
		if g, ok := next(c, 300*time.Millisecond); ok {
			t.Fatalf("expired message delivered: %v", g.d)
		}
	})
}

func TestReleaseRateCapsDeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{Policy: func(string) Policy { return Policy{ReleaseRate: 20} }})
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 1000)
		r.d.Attach(c)
		now := time.Now().UnixMilli()
		dues := make([]int64, 200)
		for i := range dues {
			dues[i] = now
		}
		r.publish("t", dues...)
		start := time.Now()
		n := 0
		for time.Since(start) < time.Second {
			if _, ok := next(c, 100*time.Millisecond); ok {
				n++
			}
		}
		// A burst of one second's worth plus the rate over the second.
		// On the bubble's clock the count is exact but for the edges.
		if n < 39 || n > 41 {
			t.Fatalf("delivered %d in one second at a release rate of 20/s, want 40 (a burst of 20, then 20/s)", n)
		}
	})
}

func fairRig(t *testing.T, weights map[string]int32) (*rig, *Consumer) {
	r := newRigWith(t, Config{Policy: func(string) Policy { return Policy{Fair: true, Weights: weights} }})
	c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 0)
	r.d.Attach(c)
	return r, c
}

func fairMessages(fk string, n int, due int64) []*fsmpb.StoredMessage {
	out := make([]*fsmpb.StoredMessage, n)
	for i := range out {
		out[i] = &fsmpb.StoredMessage{Topic: "t", Payload: []byte(fk), DueAtMs: due, Fair: true, FairnessKey: fk}
	}
	return out
}

// take grants n credits and collects n deliveries, acking each.
func take(t *testing.T, r *rig, c *Consumer, n int) []string {
	t.Helper()
	var keys []string
	for len(keys) < n {
		r.d.AddCredit(c, 1)
		g, ok := next(c, 5*time.Second)
		if !ok {
			t.Fatalf("only %d of %d delivered", len(keys), n)
		}
		keys = append(keys, string(g.d.Payload))
		r.ack(g.d)
	}
	return keys
}

func TestFairFloodDoesNotStarveTrickle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c := fairRig(t, nil)
		now := time.Now().UnixMilli()
		r.publishMessages(fairMessages("tenant-a", 2000, now-10)...)
		r.publishMessages(fairMessages("tenant-b", 10, now)...)
		got := take(t, r, c, 20)
		b := 0
		for _, k := range got {
			if k == "tenant-b" {
				b++
			}
		}
		if b != 10 {
			t.Fatalf("tenant-b got %d of its 10 within the first 20 deliveries: %v", b, got)
		}
	})
}

func TestFairWeights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c := fairRig(t, map[string]int32{"gold": 3, "bronze": 1})
		now := time.Now().UnixMilli()
		r.publishMessages(fairMessages("gold", 600, now)...)
		r.publishMessages(fairMessages("bronze", 600, now)...)
		counts := map[string]int{}
		for _, k := range take(t, r, c, 400) {
			counts[k]++
		}
		if counts["gold"] < 270 || counts["gold"] > 330 {
			t.Fatalf("gold:bronze = %d:%d over 400, want 3:1 within 10%%", counts["gold"], counts["bronze"])
		}
	})
}

func TestFairHierarchy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c := fairRig(t, nil)
		now := time.Now().UnixMilli()
		// tenant-a floods across many jobs; tenant-b has one job.
		for j := range 5 {
			r.publishMessages(fairMessages(fmt.Sprintf("a.job-%d", j), 50, now)...)
		}
		r.publishMessages(fairMessages("b.job-0", 50, now)...)
		counts := map[string]int{}
		for _, k := range take(t, r, c, 40) {
			counts[k[:1]]++
		}
		if counts["a"] < 18 || counts["a"] > 22 {
			t.Fatalf("tenants a:b = %d:%d over 40, want an even split between tenants whatever their job count", counts["a"], counts["b"])
		}
	})
}

func TestFairWithoutFairnessKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c := fairRig(t, nil)
		now := time.Now().UnixMilli()
		r.publishMessages(fairMessages("", 3, now)...)
		r.publishMessages(fairMessages("a", 3, now)...)
		counts := map[string]int{}
		for _, k := range take(t, r, c, 6) {
			counts[k]++
		}
		if counts[""] != 3 || counts["a"] != 3 {
			t.Fatalf("deliveries by key = %v, want 3 without a key and 3 of a", counts)
		}
	})
}

func TestChangeOrderedBeforeLeaseIsNotPushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ids := r.publish("t", time.Now().UnixMilli()+50)
		// A cancel begins before the round picks the message, and its command
		// lands in the log ahead of the round's lease.
		end := r.d.BeginChange()
		var once sync.Once
		r.log.beforeLease = func() {
			once.Do(func() {
				cancel := &fsmpb.Change{NowMs: time.Now().UnixMilli(), Topic: "t", Cancel: true, MessageId: ids[0][:]}
				out, err := r.log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Change{Change: cancel}})
				end(err)
				if err != nil || out.GetChange().GetCode() != fsmpb.ChangeCode_CHANGE_CODE_DONE {
					t.Errorf("cancel = %v, %v; want DONE", out.GetChange(), err)
				}
			})
		}
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		if g, ok := next(c, time.Second); ok {
			t.Fatalf("message cancelled ahead of its lease was pushed: %v", g.d)
		}
		// With no change pending, the next message is pushed as usual.
		r.publish("t", time.Now().UnixMilli())
		if _, ok := next(c, 5*time.Second); !ok {
			t.Fatalf("due message not delivered after the change settled")
		}
	})
}

func TestInsertAtFloorInstantIsDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		due := time.Now().UnixMilli()
		var msgs []*fsmpb.StoredMessage
		for i := range 20 {
			msgs = append(msgs, &fsmpb.StoredMessage{Topic: "t", Payload: []byte(fmt.Sprint(i)), DueAtMs: due})
		}
		r.publishMessages(msgs...)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 5)
		r.d.Attach(c)
		for range 5 {
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("due message missing")
			}
			r.ack(g.d)
		}
		// The scan's floor now sits inside the instant; a copy inserted at the
		// same instant sorts before it (higher priority) and must still come.
		r.publishMessages(&fsmpb.StoredMessage{Topic: "t", Payload: []byte("urgent"), DueAtMs: due, Priority: -5})
		r.d.AddCredit(c, 100)
		seen := map[string]bool{}
		for len(seen) < 16 {
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("got %d of 16 remaining deliveries; urgent delivered: %v", len(seen), seen["urgent"])
			}
			seen[string(g.d.Payload)] = true
			r.ack(g.d)
		}
		if !seen["urgent"] {
			t.Fatalf("copy inserted at the floor's instant was never delivered")
		}
	})
}

// Copies due at the same instant are pushed to their consumer together,
// so the stream takes them at once and can send them in one frame; the
// next instant's copies come in a later take, never held back to fill one.
func TestCopiesDueTogetherArePushedTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		now := time.Now().UnixMilli()
		r.publish("t", now+50, now+50, now+50, now+50, now+80)
		var takes []int
		for seen := 0; seen < 5; {
			select {
			case <-c.Ready():
			case <-time.After(5 * time.Second):
				t.Fatalf("takes %v: only %d of 5 delivered", takes, seen)
			}
			if ds := c.Take(); len(ds) > 0 {
				if at := time.Now().UnixMilli(); at < ds[0].DueAtUnixMs {
					t.Fatalf("taken at %d, before due %d", at, ds[0].DueAtUnixMs)
				}
				takes = append(takes, len(ds))
				seen += len(ds)
			}
		}
		if fmt.Sprint(takes) != "[4 1]" {
			t.Fatalf("takes = %v, want [4 1] (the four due together in one take)", takes)
		}
	})
}
