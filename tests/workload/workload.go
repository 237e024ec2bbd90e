// Package workload drives a mixed, recorded load through Sundial proxies:
// delayed publishes (0-3 s, some in batches, some re-sent with their
// request id), keyed publishes and REPLACE/DEBOUNCE rewrites of them,
// cancels and reschedules by id or key, and consumers in two groups that
// ack, sometimes nack, and sometimes let a short lease lapse. Every
// operation and delivery goes into a history.Recorder for package checker.
//
// A Workload is bounded: Run stops producing after Config.Ops operations or
// Config.Duration, whichever comes first; Drain keeps the consumers running
// until the history shows every acknowledged message delivered (or a
// timeout); Stop ends the consumers. Payloads are unique per publish, which
// the checker relies on.
//
// Goroutines: Start starts the consumers (one Subscribe per consumer);
// Run runs Config.Producers producer goroutines and returns when they end;
// Stop cancels and joins the consumers.
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/history"
)

// Config shapes the load. Zero fields take the defaults.
type Config struct {
	Topic      string   // default "chaos"
	Partitions int32    // default 2
	Groups     []string // default "default", "second"
	// Ops bounds the producer operations; default 2000.
	Ops int
	// Duration bounds the producing time; default 30 s.
	Duration time.Duration
	// Producers is the number of producer goroutines; default 3.
	Producers int
	// Rate is the producer operations per second over all producers; default 40.
	Rate int
	// ConsumersPerGroup default 2.
	ConsumersPerGroup int
	// VisibilityTimeout of every subscription; default 3 s (short, so a
	// lapsed lease is redelivered within the drain).
	VisibilityTimeout time.Duration
	// CallTimeout bounds one operation including its retries; past it the
	// answer is Unknown. Default 8 s.
	CallTimeout time.Duration
	// DedupWindow is the brokers' dedup_window: a request is sent again
	// (G6) only while they surely remember its id (see replayAge). Default
	// 10 min, the broker's default.
	DedupWindow time.Duration
	// Seed makes the choice of operations reproducible (the interleaving
	// with faults is not).
	Seed uint64
	// Token is the bearer token secret every call carries, for proxies
	// with authentication on; its role needs publish, consume, inspect and
	// manage on Topic (and Topic's dead-letter topic). Empty: none.
	Token string
}

func (c Config) withDefaults() Config {
	if c.Topic == "" {
		c.Topic = "chaos"
	}
	if c.Partitions <= 0 {
		c.Partitions = 2
	}
	if len(c.Groups) == 0 {
		c.Groups = []string{"default", "second"}
	}
	if c.Ops <= 0 {
		c.Ops = 2000
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Producers <= 0 {
		c.Producers = 3
	}
	if c.Rate <= 0 {
		c.Rate = 40
	}
	if c.ConsumersPerGroup <= 0 {
		c.ConsumersPerGroup = 2
	}
	if c.VisibilityTimeout <= 0 {
		c.VisibilityTimeout = 3 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 8 * time.Second
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = 10 * time.Minute
	}
	return c
}

// replayAge is the age (since its first invoke) up to which a request is
// sent again. A broker counts the window from when it stored the id,
// which is after the first invoke, and a re-send reaches it within
// CallTimeout; a tenth of the window more is slack. At most 0: no
// re-sends.
func (c Config) replayAge() time.Duration {
	return c.DedupWindow - c.CallTimeout - c.DedupWindow/10
}

// Workload is one recorded load against a cluster.
type Workload struct {
	cfg  Config
	cl   *client.Client
	rec  *history.Recorder
	seed atomic.Uint64

	mu     sync.Mutex    // guards recent and sent
	recent []known       // messages answered, for cancels, reschedules and rewrites
	sent   []sentRequest // the latest requests answered, to send again

	payloads atomic.Int64
	ops      atomic.Int64

	stopConsumers context.CancelFunc
	consumers     sync.WaitGroup
}

type known struct {
	id, key  string
	conflict sundialv1.KeyConflict
}

// sentRequest is a request the workload may send again: the same request
// id, which must be answered as at its first invoke.
type sentRequest struct {
	req *sundialv1.PublishRequest
	at  time.Time // its first invoke
}

// maxSent bounds the requests kept to send again.
const maxSent = 256

// New dials the proxies.
func New(ctx context.Context, cfg Config, proxies []string) (*Workload, error) {
	cfg = cfg.withDefaults()
	opts := []client.Option{client.WithAttemptTimeout(3 * time.Second)}
	if cfg.Token != "" {
		opts = append(opts, client.WithToken(cfg.Token))
	}
	cl, err := client.Dial(ctx, proxies, opts...)
	if err != nil {
		return nil, err
	}
	w := &Workload{cfg: cfg, cl: cl, rec: history.NewRecorder()}
	w.seed.Store(cfg.Seed)
	return w, nil
}

// Recorder is the workload's history.
func (w *Workload) Recorder() *history.Recorder { return w.rec }

// CheckerConfig is the checker's view of the workload's topic, groups and
// dedup window.
func (w *Workload) CheckerConfig() checker.Config {
	return checker.Config{Groups: map[string][]string{w.cfg.Topic: w.cfg.Groups}, DedupWindow: w.cfg.DedupWindow}
}

// Ops is the number of producer operations issued so far.
func (w *Workload) Ops() int64 { return w.ops.Load() }

// Setup creates the topic and its groups (retrying until ctx ends).
func (w *Workload) Setup(ctx context.Context) error {
	retry := func(what string, call func(context.Context) error) error {
		var last error
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			last = call(cctx)
			cancel()
			if last == nil {
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("workload: %s: %w (last: %w)", what, ctx.Err(), last)
	}
	admin := w.cl.Admin()
	err := retry("create topic", func(ctx context.Context) error {
		_, err := admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{IfNotExists: true, Topic: &sundialv1.Topic{
			Name: w.cfg.Topic, Partitions: w.cfg.Partitions, VisibilityTimeoutMs: w.cfg.VisibilityTimeout.Milliseconds()}})
		return err
	})
	if err != nil {
		return err
	}
	for _, g := range w.cfg.Groups {
		if g == "default" {
			continue
		}
		if err := retry("create group "+g, func(ctx context.Context) error {
			_, err := admin.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: w.cfg.Topic, Group: g, IfNotExists: true})
			return err
		}); err != nil {
			return err
		}
	}
	// The proxies learn topics from the routing table they watch; give
	// them a moment so no subscription starts before the topic is known.
	return retry("see topic", func(ctx context.Context) error {
		t, err := admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: w.cfg.Topic})
		if err != nil {
			return err
		}
		if len(t.GetGroups()) < len(w.cfg.Groups) {
			return fmt.Errorf("topic has groups %v", t.GetGroups())
		}
		time.Sleep(time.Second)
		return nil
	})
}

// Start starts the consumers.
func (w *Workload) Start(ctx context.Context) {
	ctx, w.stopConsumers = context.WithCancel(ctx)
	for _, g := range w.cfg.Groups {
		for i := range w.cfg.ConsumersPerGroup {
			name := fmt.Sprintf("%s-%d", g, i)
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(len(name))*7919+uint64(i)))
			var rngMu sync.Mutex
			w.consumers.Add(1)
			go func() {
				defer w.consumers.Done()
				opts := client.SubscribeOptions{Topic: w.cfg.Topic, Group: g, MaxInFlight: 16, VisibilityTimeout: w.cfg.VisibilityTimeout}
				for ctx.Err() == nil {
					err := w.cl.Subscribe(ctx, opts, func(ctx context.Context, d *client.Delivery) {
						rngMu.Lock()
						roll := rng.IntN(100)
						nackDelay := time.Duration(rng.IntN(500)) * time.Millisecond
						rngMu.Unlock()
						w.consume(ctx, name, g, d, roll, nackDelay)
					})
					if err != nil && ctx.Err() == nil {
						time.Sleep(500 * time.Millisecond) // a permanent error: try again, the cluster may heal
					}
				}
			}()
		}
	}
}

func (w *Workload) consume(ctx context.Context, name, group string, d *client.Delivery, roll int, nackDelay time.Duration) {
	w.rec.Delivered(history.Op{Client: name, Topic: d.GetTopic(), Group: group, MessageID: d.GetMessageId(), Key: d.GetKey(),
		Payload: string(d.GetPayload()), Receipt: d.GetReceipt(), Attempt: d.GetAttempt(), DueMs: d.GetDueAtUnixMs(),
		LeaseDeadlineMs: d.GetLeaseDeadlineUnixMs()})
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	switch {
	case d.GetAttempt() <= 2 && roll < 8:
		op := w.rec.Invoke(history.Op{Kind: history.Nack, Client: name, Group: group, Receipt: d.GetReceipt(), NackDelayMs: nackDelay.Milliseconds()})
		err := d.Nack(cctx, nackDelay, "workload")
		w.rec.Complete(op, receiptAnswer(err), err, nil)
	case d.GetAttempt() <= 2 && roll < 12:
		// Let the lease lapse: the message comes back after the
		// visibility timeout.
	default:
		op := w.rec.Invoke(history.Op{Kind: history.Ack, Client: name, Group: group, Receipt: d.GetReceipt()})
		err := d.Ack(cctx)
		w.rec.Complete(op, receiptAnswer(err), err, nil)
	}
}

// Run produces until Config.Ops operations or Config.Duration, or ctx ends.
func (w *Workload) Run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Duration)
	defer cancel()
	interval := time.Duration(int64(time.Second) * int64(w.cfg.Producers) / int64(w.cfg.Rate))
	var wg sync.WaitGroup
	for p := range w.cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(p)+1))
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if w.ops.Add(1) > int64(w.cfg.Ops) {
					return
				}
				w.step(ctx, fmt.Sprintf("producer-%d", p), rng)
			}
		}()
	}
	wg.Wait()
}

// step issues one random operation.
func (w *Workload) step(ctx context.Context, name string, rng *rand.Rand) {
	roll := rng.IntN(100)
	switch {
	case roll < 40:
		n := 1 + rng.IntN(3)
		msgs := make([]*sundialv1.Message, n)
		for i := range msgs {
			msgs[i] = &sundialv1.Message{Topic: w.cfg.Topic, Payload: w.payload(), DelayMs: int64(rng.IntN(3000))}
		}
		w.publish(ctx, name, &sundialv1.PublishRequest{RequestId: client.NewRequestID(), Messages: msgs}, false)
	case roll < 58:
		conflict := sundialv1.KeyConflict_KEY_CONFLICT_REPLACE
		if rng.IntN(2) == 0 {
			conflict = sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE
		}
		key := fmt.Sprintf("k-%d-%d", w.cfg.Seed, w.payloads.Add(1))
		w.publish(ctx, name, &sundialv1.PublishRequest{RequestId: client.NewRequestID(), Messages: []*sundialv1.Message{w.keyed(rng, key, conflict)}}, false)
	case roll < 72:
		k, ok := w.pick(rng, true)
		if !ok {
			return
		}
		w.publish(ctx, name, &sundialv1.PublishRequest{RequestId: client.NewRequestID(), Messages: []*sundialv1.Message{w.keyed(rng, k.key, k.conflict)}}, false)
	case roll < 82:
		k, ok := w.pick(rng, false)
		if !ok {
			return
		}
		w.cancel(ctx, name, k, rng.IntN(2) == 0)
	case roll < 94:
		k, ok := w.pick(rng, false)
		if !ok {
			return
		}
		w.reschedule(ctx, name, k, rng.IntN(2) == 0, time.Duration(rng.IntN(3000))*time.Millisecond)
	default:
		if req := w.replayable(rng, time.Now()); req != nil {
			w.publish(ctx, name, req, true) // the same request id again: G6
		}
	}
}

// replayable picks a request to send again among those first invoked
// less than Config.replayAge before now, whose ids the brokers surely
// still remember (an older one may be answered as a new publish, as
// documented); older ones are dropped. Nil when there is none.
func (w *Workload) replayable(rng *rand.Rand, now time.Time) *sundialv1.PublishRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	age := w.cfg.replayAge()
	w.sent = slices.DeleteFunc(w.sent, func(s sentRequest) bool { return now.Sub(s.at) >= age })
	if len(w.sent) == 0 {
		return nil
	}
	return w.sent[rng.IntN(len(w.sent))].req
}

func (w *Workload) payload() []byte {
	return fmt.Appendf(nil, "p-%d-%d", w.cfg.Seed, w.payloads.Add(1))
}

func (w *Workload) keyed(rng *rand.Rand, key string, conflict sundialv1.KeyConflict) *sundialv1.Message {
	m := &sundialv1.Message{Topic: w.cfg.Topic, Key: key, OnKeyConflict: conflict, Payload: w.payload(), DelayMs: 500 + int64(rng.IntN(2500))}
	if conflict == sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE {
		m.MaxWaitMs = 4000
	}
	return m
}

// pick returns a recently answered message (a keyed one when keyed).
func (w *Workload) pick(rng *rand.Rand, keyed bool) (known, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range 8 {
		if len(w.recent) == 0 {
			return known{}, false
		}
		k := w.recent[len(w.recent)-1-rng.IntN(min(len(w.recent), 64))]
		if !keyed || k.key != "" {
			return k, true
		}
	}
	return known{}, false
}

// remember keeps an answered message for later operations and, unless s
// is zero, its request to send again (once per request; at most maxSent,
// the latest).
func (w *Workload) remember(k known, s sentRequest) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recent = append(w.recent, k)
	if len(w.recent) > 1024 {
		w.recent = w.recent[len(w.recent)-512:]
	}
	if s.req == nil || slices.ContainsFunc(w.sent, func(o sentRequest) bool { return o.req == s.req }) {
		return
	}
	w.sent = append(w.sent, s)
	if len(w.sent) > maxSent {
		w.sent = slices.Delete(w.sent, 0, len(w.sent)-maxSent)
	}
}

// publish sends req (retrying with its request id like the SDK) and
// records one operation per message. A request sent for the first time
// (not replay) is remembered to be sent again.
func (w *Workload) publish(ctx context.Context, name string, req *sundialv1.PublishRequest, replay bool) {
	first := sentRequest{req: req, at: time.Now()}
	if replay {
		first = sentRequest{}
	}
	ops := make([]*history.Op, len(req.GetMessages()))
	for i, m := range req.GetMessages() {
		ops[i] = w.rec.Invoke(history.Op{Kind: history.Publish, Client: name, Topic: m.GetTopic(), RequestID: req.GetRequestId(), Index: i,
			Key: m.GetKey(), Conflict: conflictName(m), Payload: string(m.GetPayload()), DelayMs: m.GetDelayMs(),
			MaxWaitMs: m.GetMaxWaitMs(), TTLMs: m.GetTtlMs()})
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	var resp *sundialv1.PublishResponse
	var err error
	for {
		resp, err = w.cl.Producer().Publish(cctx, req)
		if err == nil || cctx.Err() != nil || !retryable(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		ans := callAnswer(err)
		for _, op := range ops {
			w.rec.Complete(op, ans, err, nil)
		}
		return
	}
	res := resp.GetResults()
	if len(res) != len(ops) {
		for _, op := range ops {
			w.rec.Complete(op, history.Unknown, fmt.Errorf("%d results for %d messages", len(res), len(ops)), nil)
		}
		return
	}
	for i, op := range ops {
		r := res[i]
		if e := client.StatusError(r.GetError()); e != nil {
			ans := callAnswer(e)
			w.rec.Complete(op, ans, e, func(o *history.Op) {
				if status.Code(e) == codes.AlreadyExists {
					o.Outcome = history.Rejected
				}
			})
			continue
		}
		out := keyOutcome(r.GetKeyOutcome())
		w.rec.Complete(op, history.OK, nil, func(o *history.Op) {
			o.MessageID, o.DueMs, o.Outcome = r.GetMessageId(), r.GetDueAtUnixMs(), out
		})
		m := req.GetMessages()[i]
		w.remember(known{id: r.GetMessageId(), key: m.GetKey(), conflict: m.GetOnKeyConflict()}, first)
	}
}

// Publish publishes msgs as one recorded request from client name, for
// scenario tests that place their own messages.
func (w *Workload) Publish(ctx context.Context, name string, msgs ...*sundialv1.Message) {
	w.publish(ctx, name, &sundialv1.PublishRequest{RequestId: client.NewRequestID(), Messages: msgs}, false)
}

// Cancel cancels message id as a recorded operation of client name.
func (w *Workload) Cancel(ctx context.Context, name, id string) {
	w.cancel(ctx, name, known{id: id}, false)
}

// cancel and reschedule give each operation a request id and pass it to
// the SDK, which keeps it across its retries of an Unknown outcome (an
// attempt timing out behind a paused leader), so a retry answers the first
// attempt's outcome instead of changing a message published under the key
// since (chaos finding C). The id is recorded with the operation.
func (w *Workload) cancel(ctx context.Context, name string, k known, byKey bool) {
	rid := client.NewRequestID()
	sel, op := w.selector(name, history.Cancel, k, byKey, rid)
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	resp, err := w.cl.Cancel(cctx, sel, client.WithRequestID(rid))
	w.completeChange(op, err, resp.GetOutcome(), resp.GetMessageId(), 0)
}

func (w *Workload) reschedule(ctx context.Context, name string, k known, byKey bool, delay time.Duration) {
	rid := client.NewRequestID()
	sel, op := w.selector(name, history.Reschedule, k, byKey, rid)
	op.DelayMs = delay.Milliseconds()
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	resp, err := w.cl.RescheduleIn(cctx, sel, delay, client.WithRequestID(rid))
	w.completeChange(op, err, resp.GetOutcome(), resp.GetMessageId(), resp.GetDueAtUnixMs())
}

func (w *Workload) selector(name string, kind history.Kind, k known, byKey bool, rid string) (*sundialv1.MessageSelector, *history.Op) {
	if byKey && k.key != "" {
		return client.ByKey(w.cfg.Topic, k.key), w.rec.Invoke(history.Op{Kind: kind, Client: name, Topic: w.cfg.Topic, Key: k.key, ByKey: true, RequestID: rid})
	}
	return client.ByID(w.cfg.Topic, k.id), w.rec.Invoke(history.Op{Kind: kind, Client: name, Topic: w.cfg.Topic, MessageID: k.id, RequestID: rid})
}

func (w *Workload) completeChange(op *history.Op, err error, out sundialv1.ChangeOutcome, id string, due int64) {
	if err != nil {
		w.rec.Complete(op, callAnswer(err), err, nil)
		return
	}
	w.rec.Complete(op, history.OK, nil, func(o *history.Op) {
		o.Outcome = changeOutcome(out)
		if id != "" {
			o.MessageID = id
		}
		o.DueMs = due
	})
}

// Drain waits until the history shows every acknowledged message
// delivered to every group (the checker's liveness properties hold), or
// timeout; it reports the violations still outstanding.
func (w *Workload) Drain(timeout time.Duration) []checker.Violation {
	deadline := time.Now().Add(timeout)
	for {
		res := checker.Check(w.CheckerConfig(), w.rec.Ops())
		var pending []checker.Violation
		for _, v := range res.Violations {
			if v.Liveness {
				pending = append(pending, v)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			return pending
		}
		time.Sleep(time.Second)
	}
}

// Stop ends the consumers and closes the client.
func (w *Workload) Stop() {
	if w.stopConsumers != nil {
		w.stopConsumers()
	}
	w.consumers.Wait()
	w.cl.Close()
}

func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// callAnswer classifies a failed call: a definite refusal (nothing
// happened) or Unknown.
func callAnswer(err error) history.Answer {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return history.Unknown
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.NotFound, codes.FailedPrecondition,
		codes.PermissionDenied, codes.Unauthenticated, codes.OutOfRange, codes.Unimplemented:
		return history.Failed
	}
	return history.Unknown
}

// receiptAnswer classifies an ack's or nack's result.
func receiptAnswer(err error) history.Answer {
	if err == nil {
		return history.OK
	}
	return callAnswer(err)
}

func conflictName(m *sundialv1.Message) string {
	if m.GetKey() == "" {
		return ""
	}
	switch m.GetOnKeyConflict() {
	case sundialv1.KeyConflict_KEY_CONFLICT_REPLACE:
		return "REPLACE"
	case sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE:
		return "DEBOUNCE"
	case sundialv1.KeyConflict_KEY_CONFLICT_REJECT:
		return "REJECT"
	}
	return "IGNORE"
}

func keyOutcome(o sundialv1.KeyOutcome) history.Outcome {
	switch o {
	case sundialv1.KeyOutcome_KEY_OUTCOME_IGNORED:
		return history.Ignored
	case sundialv1.KeyOutcome_KEY_OUTCOME_REPLACED:
		return history.Replaced
	case sundialv1.KeyOutcome_KEY_OUTCOME_DEBOUNCED:
		return history.Debounced
	}
	return history.Created
}

func changeOutcome(o sundialv1.ChangeOutcome) history.Outcome {
	switch o {
	case sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE:
		return history.Done
	case sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT:
		return history.InFlight
	case sundialv1.ChangeOutcome_CHANGE_OUTCOME_ALREADY_DELIVERED:
		return history.AlreadyDelivered
	}
	return history.NotFound
}

// UnknownCauses counts the operations answered Unknown by kind and error
// (cut to 90 bytes), most frequent first, for a run's report.
func UnknownCauses(ops []history.Op) string {
	n := map[string]int{}
	for _, op := range ops {
		if op.Answer != history.Unknown {
			continue
		}
		e := op.Error
		if e == "" {
			e = "no answer"
		}
		if len(e) > 90 {
			e = e[:90]
		}
		n[string(op.Kind)+": "+e]++
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return n[keys[i]] > n[keys[j]] || (n[keys[i]] == n[keys[j]] && keys[i] < keys[j]) })
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "\n  %5d %s", n[k], k)
	}
	return sb.String()
}
