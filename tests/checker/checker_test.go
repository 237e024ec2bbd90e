package checker

import (
	"fmt"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/history"
)

// t0 is the start of every hand-made history; times are ms after it.
var t0 = time.UnixMilli(1_700_000_000_000)

func at(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// h builds a history; each helper appends one operation.
type h struct{ ops []history.Op }

func (b *h) add(op history.Op) *h {
	op.Seq = len(b.ops)
	if op.Topic == "" {
		op.Topic = "t"
	}
	b.ops = append(b.ops, op)
	return b
}

// pub is a publish invoked at inv, answered OK at done with outcome out.
func (b *h) pub(inv, done int64, id, key, payload string, out history.Outcome, dueMs int64) *h {
	return b.add(history.Op{Kind: history.Publish, Invoke: at(inv), Complete: at(done), Answer: history.OK, RequestID: "r-" + payload,
		MessageID: id, Key: key, Payload: payload, Outcome: out, DueMs: t0.UnixMilli() + dueMs, DelayMs: dueMs - inv})
}

func (b *h) pubUnknown(inv int64, key, conflict, payload string, delayMs int64) *h {
	return b.add(history.Op{Kind: history.Publish, Invoke: at(inv), Answer: history.Unknown, Key: key, Conflict: conflict,
		Payload: payload, DelayMs: delayMs, RequestID: "r-" + payload})
}

// deliver is a delivery received at recv of attempt with a lease ending at lease.
func (b *h) deliver(recv int64, id, group, payload string, attempt int32, dueMs, leaseMs int64) *h {
	return b.add(history.Op{Kind: history.Deliver, Invoke: at(recv), Complete: at(recv), Answer: history.OK, MessageID: id,
		Group: group, Payload: payload, Attempt: attempt, Receipt: fmt.Sprintf("%s/%s/%d", id, group, attempt),
		DueMs: t0.UnixMilli() + dueMs, LeaseDeadlineMs: t0.UnixMilli() + leaseMs})
}

func (b *h) ack(inv, done int64, id, group string, attempt int32) *h {
	return b.add(history.Op{Kind: history.Ack, Invoke: at(inv), Complete: at(done), Answer: history.OK,
		Receipt: fmt.Sprintf("%s/%s/%d", id, group, attempt)})
}

func (b *h) nack(inv, done int64, id, group string, attempt int32, delayMs int64) *h {
	return b.add(history.Op{Kind: history.Nack, Invoke: at(inv), Complete: at(done), Answer: history.OK, NackDelayMs: delayMs,
		Receipt: fmt.Sprintf("%s/%s/%d", id, group, attempt)})
}

func (b *h) change(kind history.Kind, inv, done int64, id string, ans history.Answer, out history.Outcome, dueMs int64) *h {
	op := history.Op{Kind: kind, Invoke: at(inv), Answer: ans, MessageID: id, Outcome: out}
	if ans != history.Unknown {
		op.Complete = at(done)
	}
	if dueMs != 0 {
		op.DueMs = t0.UnixMilli() + dueMs
		op.DelayMs = dueMs - inv
	}
	return b.add(op)
}

func TestCheck(t *testing.T) {
	one := map[string][]string{"t": {"g"}}
	two := map[string][]string{"t": {"a", "b"}}
	tests := []struct {
		name   string
		groups map[string][]string
		hist   *h
		want   map[string]int // violations per property
	}{
		{"G1 clean: delivered to both groups", two,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "a", "p", 1, 100, 30100).deliver(101, "m1", "b", "p", 1, 100, 30101),
			nil},
		{"G1 violation: one group never got it", two,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "a", "p", 1, 100, 30100),
			map[string]int{"G1": 1}},
		{"G1 clean: cancelled DONE", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 1000).change(history.Cancel, 10, 20, "m1", history.OK, history.Done, 0),
			nil},
		{"G1 clean: cancel unknown", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 1000).change(history.Cancel, 10, 0, "m1", history.Unknown, "", 0),
			nil},
		{"G2 violation: delivered 100 ms early", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 1000).deliver(900, "m1", "g", "p", 1, 1000, 31000),
			map[string]int{"G2": 1}},
		{"G2 clean: delivered within the tolerance", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 1000).deliver(999, "m1", "g", "p", 1, 1000, 31000),
			nil},
		{"G2 violation: before a DONE reschedule's new due", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 1000).
				change(history.Reschedule, 10, 20, "m1", history.OK, history.Done, 5000).
				deliver(1500, "m1", "g", "p", 1, 1000, 31500),
			map[string]int{"G2": 1}},
		{"G2 clean: an unknown reschedule may have made it earlier", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 5000).
				change(history.Reschedule, 10, 0, "m1", history.Unknown, "", 500).
				deliver(600, "m1", "g", "p", 1, 500, 30600),
			nil},
		{"G3 violation: delivered after a DONE cancel", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 1000).
				change(history.Cancel, 10, 20, "m1", history.OK, history.Done, 0).
				deliver(1000, "m1", "g", "p", 1, 1000, 31000),
			map[string]int{"G3": 1}},
		{"G3 clean: delivered before the cancel answered IN_FLIGHT", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 30100).
				change(history.Cancel, 200, 210, "m1", history.OK, history.InFlight, 0),
			nil},
		{"G4 violation: redelivered before the lease ended, no nack", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 1100).
				deliver(600, "m1", "g", "p", 2, 100, 1600),
			map[string]int{"G4": 1}},
		{"G4 clean: redelivered after a nack's delay", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 30100).
				nack(200, 210, "m1", "g", 1, 300).deliver(501, "m1", "g", "p", 2, 100, 30501),
			nil},
		{"G4 violation: redelivered before the nack's delay", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 30100).
				nack(200, 210, "m1", "g", 1, 1000).deliver(500, "m1", "g", "p", 2, 100, 30500),
			map[string]int{"G4": 1}},
		{"G4 clean: redelivered after the lease", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 1100).
				deliver(1100, "m1", "g", "p", 2, 100, 2100),
			nil},
		{"G5 violation: old payload after REPLACED", one,
			new(h).pub(0, 5, "m1", "k", "old", history.Created, 1000).pub(10, 20, "m1", "k", "new", history.Replaced, 1000).
				deliver(1000, "m1", "g", "old", 1, 1000, 31000),
			map[string]int{"G5": 2}}, // the wrong payload, and the new one never came
		{"G5 clean: new payload after REPLACED", one,
			new(h).pub(0, 5, "m1", "k", "old", history.Created, 1000).pub(10, 20, "m1", "k", "new", history.Replaced, 1000).
				deliver(1000, "m1", "g", "new", 1, 1000, 31000),
			nil},
		{"G5 clean: a concurrent unknown REPLACE may win", one,
			new(h).pub(0, 5, "m1", "k", "old", history.Created, 100).pubUnknown(50, "k", "REPLACE", "new", 50).
				deliver(100, "m1", "g", "new", 1, 100, 30100),
			nil},
		{"G5 violation: DEBOUNCED payload never delivered, old one acked after the answer", one,
			new(h).pub(0, 5, "m1", "k", "old", history.Created, 100).deliver(100, "m1", "g", "old", 1, 100, 30100).
				pub(101, 110, "m1", "k", "new", history.Debounced, 100).ack(120, 130, "m1", "g", 1),
			map[string]int{"G5": 1}},
		{"G5 clean: acked before the DEBOUNCE answer", one,
			new(h).pub(0, 5, "m1", "k", "old", history.Created, 100).deliver(100, "m1", "g", "old", 1, 100, 30100).
				ack(101, 105, "m1", "g", 1).pub(102, 110, "m1", "k", "new", history.Debounced, 100),
			nil},
		{"G6 violation: a retried request answered another id", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).pub(10, 15, "m2", "", "p", history.Created, 100).
				deliver(100, "m1", "g", "p", 1, 100, 30100).deliver(100, "m2", "g", "p", 1, 100, 30100),
			map[string]int{"G6": 1}},
		{"G6 clean: a retried request answered the same", one,
			new(h).pub(0, 5, "m1", "", "p", history.Created, 100).pub(10, 15, "m1", "", "p", history.Created, 100).
				deliver(100, "m1", "g", "p", 1, 100, 30100),
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Check(Config{Groups: tt.groups}, tt.hist.ops)
			got := res.ByProperty()
			if len(got) != len(tt.want) {
				t.Fatalf("Check() violations = %v, want %v\n%s", got, tt.want, res)
			}
			for p, n := range tt.want {
				if got[p] != n {
					t.Fatalf("Check() violations = %v, want %v\n%s", got, tt.want, res)
				}
			}
		})
	}
}

func TestCheckSkipLiveness(t *testing.T) {
	hist := new(h).pub(0, 5, "m1", "", "p", history.Created, 100)
	res := Check(Config{Groups: map[string][]string{"t": {"g"}}, SkipLiveness: true}, hist.ops)
	if len(res.Violations) != 0 {
		t.Fatalf("Check(SkipLiveness) = %s, want no violations", res)
	}
}

func TestCheckResentRequestIsOnePublish(t *testing.T) {
	// k is created with "a", debounced to "b"; then the request that
	// created it is sent again and replays CREATED "a". A delivery of "b"
	// after the replay is what the last change promised.
	hist := new(h).pub(0, 5, "m1", "k", "a", history.Created, 1000).
		pub(10, 20, "m1", "k", "b", history.Debounced, 1500)
	replay := hist.ops[0]
	replay.Invoke, replay.Complete = at(30), at(40)
	hist.add(replay).deliver(1500, "m1", "g", "b", 1, 1500, 31500)
	res := Check(Config{Groups: map[string][]string{"t": {"g"}}}, hist.ops)
	if len(res.Violations) != 0 {
		t.Fatalf("Check() = %s, want no violations", res)
	}
}

func TestCheckNackAnsweredStaleStillCounts(t *testing.T) {
	hist := new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 30100)
	hist.add(history.Op{Kind: history.Nack, Invoke: at(110), Complete: at(900), Answer: history.Failed, NackDelayMs: 300,
		Receipt: "m1/g/1", Error: "receipt is stale"})
	hist.deliver(500, "m1", "g", "p", 2, 100, 30500)
	res := Check(Config{Groups: map[string][]string{"t": {"g"}}}, hist.ops)
	if len(res.Violations) != 0 {
		t.Fatalf("Check() = %s, want no violations", res)
	}
}

// TestCheckDedupWindow: a request id's answers agree within the brokers'
// dedup window; a re-send that may have reached the broker after it (first
// invoke + window) may be answered as a new publish, which is then its own
// message, and that new answer holds for the re-sends after it.
func TestCheckDedupWindow(t *testing.T) {
	const window = 10_000 // ms
	one := map[string][]string{"t": {"g"}}
	first := func() *h {
		return new(h).pub(0, 5, "m1", "", "p", history.Created, 100).deliver(100, "m1", "g", "p", 1, 100, 30100)
	}
	tests := []struct {
		name   string
		window time.Duration
		hist   *h
		want   map[string]int
	}{
		{"just inside the window: a new message is a second outcome", window * time.Millisecond,
			first().pub(window-20, window-10, "m2", "", "p", history.Created, window+90).deliver(window+90, "m2", "g", "p", 1, window+90, window+30090),
			map[string]int{"G6": 1}},
		{"just inside the window: the first outcome", window * time.Millisecond,
			first().pub(window-20, window-10, "m1", "", "p", history.Created, 100),
			nil},
		{"answered after the window: a new message is allowed", window * time.Millisecond,
			first().pub(window-20, window+10, "m2", "", "p", history.Created, window+100).deliver(window+100, "m2", "g", "p", 1, window+100, window+30100),
			nil},
		{"after the window: the first outcome still (not swept yet)", window * time.Millisecond,
			first().pub(window+50, window+60, "m1", "", "p", history.Created, 100),
			nil},
		{"after a new outcome the first one is gone", window * time.Millisecond,
			first().pub(window+50, window+60, "m2", "", "p", history.Created, window+150).deliver(window+150, "m2", "g", "p", 1, window+150, window+30150).
				pub(window+200, window+210, "m1", "", "p", history.Created, 100),
			map[string]int{"G6": 1}},
		{"the new message must be delivered like any publish", window * time.Millisecond,
			first().pub(window+50, window+60, "m2", "", "p", history.Created, window+150),
			map[string]int{"G1": 1}},
		{"without a window a request id never expires", 0,
			first().pub(window+50, window+60, "m2", "", "p", history.Created, window+150).deliver(window+150, "m2", "g", "p", 1, window+150, window+30150),
			map[string]int{"G6": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Check(Config{Groups: one, DedupWindow: tt.window}, tt.hist.ops)
			got := res.ByProperty()
			if len(got) != len(tt.want) {
				t.Fatalf("Check() violations = %v, want %v\n%s", got, tt.want, res)
			}
			for p, n := range tt.want {
				if got[p] != n {
					t.Fatalf("Check() violations = %v, want %v\n%s", got, tt.want, res)
				}
			}
		})
	}
}
