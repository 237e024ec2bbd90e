// Package checker judges a history (package history) against the delivery
// guarantees of DESIGN.md §9. It flags only definite violations: an
// operation whose answer is Unknown may or may not have taken effect, so
// it widens what the checker accepts and never convicts.
//
// The properties, per message m and consumer group g:
//
//	G1 an acknowledged publish (answered CREATED, REPLACED or DEBOUNCED) is
//	   delivered to every group of its topic, unless a cancel of it was
//	   answered DONE (or is Unknown) or it has a TTL. Judged on a history
//	   taken after a quiescent drain.
//	G2 no delivery is received before its due time: the due time the last
//	   completed publish/REPLACE/DEBOUNCE/DONE reschedule promised, or an
//	   earlier one a concurrent or Unknown operation may have set; nor
//	   before the due time the delivery itself carries.
//	G3 no delivery is received after a cancel of its message was answered
//	   DONE.
//	G4 a redelivery (attempt n > 1) is received only after attempt n-1's
//	   lease deadline or after a nack of attempt n-1 (plus its delay),
//	   whatever that nack was answered (a retried nack that took effect
//	   answers "stale receipt").
//	G5 the payload delivered is one the last completed content change
//	   promised (or a concurrent one); and a REPLACED or DEBOUNCED answer's
//	   payload reaches every group that had not acked before the answer.
//	G6 every OK answer to one request id (and message index) names the
//	   same message and due time, within the dedup window
//	   (Config.DedupWindow): a re-send that may have reached the broker
//	   after the window since the first use may be answered anew, and its
//	   answer holds from then on. For G2 and G5 the answers to one use of a
//	   request id are one logical publish, from its first invoke to its
//	   first answer.
//
// Times: every process runs on one machine and one clock; Config.Tolerance
// absorbs millisecond truncation. The checker is pure: it reads Ops and
// returns a Result, and holds no state between calls.
package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sundialmq/sundial/tests/history"
)

// Config says what the checker needs beyond the history.
type Config struct {
	// Groups lists, per topic, the groups every message must reach (those
	// created before the first publish).
	Groups map[string][]string
	// Tolerance is the clock slack of the time comparisons; default 1 ms.
	Tolerance time.Duration
	// DedupWindow is the brokers' dedup_window: a request id is
	// remembered for it after the broker stored the id's first answer, so
	// a re-sent request that may have reached the broker later than its
	// first invoke plus the window may be answered as a new request (G6),
	// and is then a publish of its own. Zero: request ids never expire.
	DedupWindow time.Duration
	// SkipLiveness leaves out the properties that need a drained history
	// (G1 and G5's promised-payload check), for a history cut mid-run.
	SkipLiveness bool
}

// Violation is one definite breach of a property.
type Violation struct {
	Property  string // "G1" … "G6"; "G7" comes from comparing replica hashes, not from a history
	MessageID string
	Group     string
	Detail    string
	Seqs      []int // the operations that prove it
	// Liveness marks a violation that only a drained history proves (G1,
	// G5's promised payload): while draining it may still resolve.
	Liveness bool
}

func (v Violation) String() string {
	return fmt.Sprintf("%s message %s group %q: %s (ops %v)", v.Property, v.MessageID, v.Group, v.Detail, v.Seqs)
}

// Result is what a check found.
type Result struct {
	Ops        int // operations in the history
	Messages   int // messages known by id
	Deliveries int
	Unknown    int // operations answered Unknown
	Violations []Violation
}

// ByProperty counts the violations per property.
func (r Result) ByProperty() map[string]int {
	m := map[string]int{}
	for _, v := range r.Violations {
		m[v.Property]++
	}
	return m
}

// Summary is one line: the counts and the violations per property.
func (r Result) Summary() string {
	by := r.ByProperty()
	var parts []string
	for _, p := range []string{"G1", "G2", "G3", "G4", "G5", "G6", "G7"} {
		parts = append(parts, fmt.Sprintf("%s=%d", p, by[p]))
	}
	return fmt.Sprintf("%d operations, %d messages, %d deliveries, %d unknown answers, %d violations (%s)",
		r.Ops, r.Messages, r.Deliveries, r.Unknown, len(r.Violations), strings.Join(parts, " "))
}

func (r Result) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d operations, %d messages, %d deliveries, %d unknown answers, %d violations",
		r.Ops, r.Messages, r.Deliveries, r.Unknown, len(r.Violations))
	for _, v := range r.Violations {
		sb.WriteString("\n  ")
		sb.WriteString(v.String())
	}
	return sb.String()
}

// message is everything the history says about one message id.
type message struct {
	id, topic, key string
	ttl            bool
	events         []*event // content changes and reschedules that may touch it
	cancels        []*history.Op
	deliveries     []*history.Op
	acks           map[string][]*history.Op // by receipt
	nacks          map[string][]*history.Op
	acknowledged   *history.Op // a definite publish answer proving it pending
}

// event is an operation that may have changed a message's due time or
// content.
type event struct {
	op       *history.Op
	definite bool  // answered OK with a change
	dueMs    int64 // lower bound of the due time it set
	content  bool  // a publish: it set the payload too
}

func (e *event) completedBefore(t time.Time) bool {
	return e.definite && !e.op.Complete.IsZero() && e.op.Complete.Before(t)
}

// Check judges ops.
func Check(cfg Config, ops []history.Op) Result {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = time.Millisecond
	}
	c := &run{cfg: cfg, msgs: map[string]*message{}, byKey: map[string][]*message{}}
	c.index(ops)
	res := Result{Ops: len(ops), Messages: len(c.msgs)}
	for i := range ops {
		if ops[i].Answer == history.Unknown {
			res.Unknown++
		}
		if ops[i].Kind == history.Deliver {
			res.Deliveries++
		}
	}
	ids := make([]string, 0, len(c.msgs))
	for id := range c.msgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := c.msgs[id]
		c.checkDeliveries(m)
		if !cfg.SkipLiveness {
			c.checkLiveness(m)
		}
	}
	c.checkRequestIDs()
	res.Violations = c.violations
	return res
}

type run struct {
	cfg        Config
	msgs       map[string]*message
	byKey      map[string][]*message // topic/key -> messages that had it
	uses       requestUseSet         // the uses of each request id (G6)
	violations []Violation
}

func (c *run) flag(prop string, m *message, group, detail string, ops ...*history.Op) {
	seqs := make([]int, len(ops))
	for i, o := range ops {
		seqs[i] = o.Seq
	}
	c.violations = append(c.violations, Violation{Property: prop, MessageID: m.id, Group: group, Detail: detail, Seqs: seqs})
}

func (c *run) msg(id, topic, key string) *message {
	m := c.msgs[id]
	if m == nil {
		m = &message{id: id, topic: topic, acks: map[string][]*history.Op{}, nacks: map[string][]*history.Op{}}
		c.msgs[id] = m
	}
	if key != "" && m.key == "" {
		m.key = key
		c.byKey[topic+"/"+key] = append(c.byKey[topic+"/"+key], m)
	}
	return m
}

// targets are the messages an operation may have touched: the one its
// answer names, else every message that had its key.
func (c *run) targets(op *history.Op) []*message {
	if op.MessageID != "" {
		if m := c.msgs[op.MessageID]; m != nil {
			return []*message{m}
		}
		return nil
	}
	if op.Key != "" {
		return c.byKey[op.Topic+"/"+op.Key]
	}
	return nil
}

func (c *run) index(ops []history.Op) {
	// Pass 1: messages from answers and deliveries, and receipts.
	receiptMsg := map[string]*message{}
	for i := range ops {
		op := &ops[i]
		switch op.Kind {
		case history.Publish:
			if op.Answer == history.OK && op.MessageID != "" {
				m := c.msg(op.MessageID, op.Topic, op.Key)
				m.ttl = m.ttl || op.TTLMs > 0
				switch op.Outcome {
				case history.Created, history.Replaced, history.Debounced:
					if m.acknowledged == nil {
						m.acknowledged = op
					}
				}
			}
		case history.Deliver:
			m := c.msg(op.MessageID, op.Topic, op.Key)
			m.deliveries = append(m.deliveries, op)
			receiptMsg[op.Receipt] = m
		}
	}
	// Payloads are unique per publish in the workloads: an unkeyed publish
	// answered Unknown is found by the payload delivered.
	byPayload := map[string][]*message{}
	for _, m := range c.msgs {
		seen := map[string]bool{}
		for _, d := range m.deliveries {
			if !seen[d.Payload] {
				seen[d.Payload] = true
				byPayload[d.Payload] = append(byPayload[d.Payload], m)
			}
		}
	}
	// Pass 2: what may have changed each message. The answers to one use
	// of a request id are one logical publish (a re-sent request replays
	// the stored answer), taken from its first invoke to its first answer;
	// a re-send answered anew after the dedup window is another.
	c.uses = requestUses(ops, c.cfg.DedupWindow, c.cfg.Tolerance)
	logical := mergeRequests(ops, c.uses.use)
	for i := range ops {
		op := &ops[i]
		if op.Kind == history.Publish && op.RequestID != "" {
			op = logical[c.uses.use[i]]
			if op.Seq != ops[i].Seq {
				continue // only the first op of a use stands for it
			}
		}
		switch op.Kind {
		case history.Publish:
			ev := publishEvent(op)
			if ev == nil {
				continue
			}
			targets := c.targets(op)
			if op.MessageID == "" && op.Key == "" {
				targets = byPayload[op.Payload]
			}
			for _, m := range targets {
				if op.TTLMs > 0 {
					m.ttl = true
				}
				m.events = append(m.events, ev)
			}
		case history.Reschedule:
			ev := rescheduleEvent(op)
			if ev == nil {
				continue
			}
			for _, m := range c.targets(op) {
				m.events = append(m.events, ev)
			}
		case history.Cancel:
			for _, m := range c.targets(op) {
				m.cancels = append(m.cancels, op)
			}
		case history.Ack:
			if m := receiptMsg[op.Receipt]; m != nil {
				m.acks[op.Receipt] = append(m.acks[op.Receipt], op)
			}
		case history.Nack:
			if m := receiptMsg[op.Receipt]; m != nil {
				m.nacks[op.Receipt] = append(m.nacks[op.Receipt], op)
			}
		}
	}
}

// publishEvent is what a publish may have done to its key's message; nil
// when it definitely changed nothing.
func publishEvent(op *history.Op) *event {
	switch op.Answer {
	case history.Failed:
		return nil
	case history.OK:
		switch op.Outcome {
		case history.Created, history.Replaced, history.Debounced:
			return &event{op: op, definite: true, dueMs: op.DueMs, content: true}
		}
		return nil
	}
	lower := op.Invoke.UnixMilli() + op.DelayMs
	if op.Conflict == "DEBOUNCE" {
		lower = 0 // capped by the first publish's max_wait: no useful bound
	}
	return &event{op: op, dueMs: lower, content: true}
}

func rescheduleEvent(op *history.Op) *event {
	switch op.Answer {
	case history.Failed:
		return nil
	case history.OK:
		if op.Outcome != history.Done {
			return nil
		}
		due := op.DueMs
		if due == 0 {
			due = op.Invoke.UnixMilli() + op.DelayMs
		}
		return &event{op: op, definite: true, dueMs: due}
	}
	return &event{op: op, dueMs: op.Invoke.UnixMilli() + op.DelayMs}
}

// candidates are the events whose promise may hold at time t: the last
// definite one completed before t, and every other one invoked before t
// that may be ordered after it. With no definite event completed before
// t, every event invoked before t. Only content events when content.
func candidates(events []*event, t time.Time, content bool) []*event {
	var last *event
	for _, e := range events {
		if content && !e.content {
			continue
		}
		if e.completedBefore(t) && (last == nil || e.op.Complete.After(last.op.Complete)) {
			last = e
		}
	}
	var out []*event
	if last != nil {
		out = append(out, last)
	}
	for _, e := range events {
		if e == last || (content && !e.content) || !e.op.Invoke.Before(t) {
			continue
		}
		if last == nil || e.op.Complete.IsZero() || e.op.Complete.After(last.op.Invoke) {
			out = append(out, e)
		}
	}
	return out
}

// checkDeliveries checks G2, G3, G4 and G5's payload on every delivery of m.
func (c *run) checkDeliveries(m *message) {
	tol := c.cfg.Tolerance.Milliseconds()
	for _, d := range m.deliveries {
		r := d.Invoke
		rMs := r.UnixMilli()
		// G2: the promised due times, else the delivery's own.
		early := false
		if cands := candidates(m.events, r, false); len(cands) > 0 {
			lowest := cands[0]
			for _, e := range cands[1:] {
				if e.dueMs < lowest.dueMs {
					lowest = e
				}
			}
			if rMs+tol < lowest.dueMs {
				early = true
				c.flag("G2", m, d.Group, fmt.Sprintf("received at %d, %d ms before the due time %d that op %d (%s %s) promised",
					rMs, lowest.dueMs-rMs, lowest.dueMs, lowest.op.Seq, lowest.op.Kind, lowest.op.Outcome), lowest.op, d)
			}
		}
		if !early && d.DueMs > 0 && rMs+tol < d.DueMs {
			c.flag("G2", m, d.Group, fmt.Sprintf("received at %d, %d ms before its due_at %d", rMs, d.DueMs-rMs, d.DueMs), d)
		}
		// G3: after a DONE cancel.
		for _, cn := range m.cancels {
			if cn.Answer == history.OK && cn.Outcome == history.Done && cn.Complete.UnixMilli()+tol < rMs {
				c.flag("G3", m, d.Group, fmt.Sprintf("received %d ms after a cancel answered DONE", rMs-cn.Complete.UnixMilli()), cn, d)
			}
		}
		// G5: the payload one of the promises carries.
		if cands := candidates(m.events, r, true); len(cands) > 0 {
			ok := false
			for _, e := range cands {
				if e.op.Payload == d.Payload {
					ok = true
					break
				}
			}
			if !ok {
				c.flag("G5", m, d.Group, fmt.Sprintf("payload %q, want one of %q", d.Payload, payloads(cands)), append(ops(cands), d)...)
			}
		}
		// G4: a redelivery waits for the previous lease or a nack.
		if d.Attempt > 1 {
			c.checkRedelivery(m, d)
		}
	}
}

func (c *run) checkRedelivery(m *message, d *history.Op) {
	tol := c.cfg.Tolerance.Milliseconds()
	rMs := d.Invoke.UnixMilli()
	var prev []*history.Op
	for _, p := range m.deliveries {
		if p.Group == d.Group && p.Attempt == d.Attempt-1 {
			prev = append(prev, p)
		}
	}
	if len(prev) == 0 {
		return // the previous attempt was never seen: nothing to judge by
	}
	for _, p := range prev {
		if p.LeaseDeadlineMs == 0 || rMs+tol >= p.LeaseDeadlineMs {
			return
		}
		// Any nack counts, whatever it was answered: the SDK retries a nack,
		// and a retry of one that took effect answers "stale receipt".
		for _, n := range m.nacks[p.Receipt] {
			if n.Invoke.Before(d.Invoke) && rMs+tol >= n.Invoke.UnixMilli()+n.NackDelayMs {
				return
			}
		}
		// A content change or reschedule between the attempts may fence
		// the lease on purpose.
		for _, e := range m.events {
			if e.op.Invoke.Before(d.Invoke) && (e.op.Complete.IsZero() || e.op.Complete.After(p.Invoke)) {
				return
			}
		}
	}
	p := prev[0]
	c.flag("G4", m, d.Group, fmt.Sprintf("attempt %d received at %d, %d ms before attempt %d's lease deadline %d, with no nack",
		d.Attempt, rMs, p.LeaseDeadlineMs-rMs, p.Attempt, p.LeaseDeadlineMs), p, d)
}

// checkLiveness checks G1 and G5's promised payload on a drained history.
func (c *run) checkLiveness(m *message) {
	if m.acknowledged == nil || m.ttl {
		return
	}
	for _, cn := range m.cancels {
		if cn.Answer == history.Unknown || cn.Outcome == history.Done {
			return
		}
	}
	for _, g := range c.cfg.Groups[m.topic] {
		var got []*history.Op
		for _, d := range m.deliveries {
			if d.Group == g {
				got = append(got, d)
			}
		}
		if len(got) == 0 {
			c.flag("G1", m, g, "acknowledged publish never delivered", m.acknowledged)
			c.violations[len(c.violations)-1].Liveness = true
			continue
		}
		c.checkPromisedPayloads(m, g, got)
	}
}

// checkPromisedPayloads: each REPLACED or DEBOUNCED answer's payload (or a
// later concurrent one) reaches group g, unless g acked m before the
// answer came.
func (c *run) checkPromisedPayloads(m *message, g string, got []*history.Op) {
	for _, x := range m.events {
		if !x.definite || !x.content || (x.op.Outcome != history.Replaced && x.op.Outcome != history.Debounced) {
			continue
		}
		ackedBefore := false
		for _, d := range got {
			for _, a := range m.acks[d.Receipt] {
				if a.Invoke.Before(x.op.Complete) {
					ackedBefore = true
				}
			}
		}
		if ackedBefore {
			continue
		}
		want := map[string]bool{x.op.Payload: true}
		for _, y := range m.events {
			if y != x && y.content && (y.op.Complete.IsZero() || y.op.Complete.After(x.op.Invoke)) {
				want[y.op.Payload] = true
			}
		}
		found := false
		for _, d := range got {
			if want[d.Payload] && !d.Invoke.Before(x.op.Invoke) {
				found = true
				break
			}
		}
		if !found {
			c.flag("G5", m, g, fmt.Sprintf("%s answered for payload %q, which was never delivered", x.op.Outcome, x.op.Payload), x.op)
			c.violations[len(c.violations)-1].Liveness = true
		}
	}
}

func payloads(es []*event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.op.Payload
	}
	return out
}

func ops(es []*event) []*history.Op {
	out := make([]*history.Op, len(es))
	for i, e := range es {
		out[i] = e.op
	}
	return out
}
