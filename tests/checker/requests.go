package checker

import (
	"fmt"
	"time"

	"github.com/sundialmq/sundial/tests/history"
)

// requestSlot is one use of a request id for one message index: the
// publishes that must share one outcome. A request re-sent after the
// broker may have forgotten the id (its dedup window passed) may start a
// new use.
type requestSlot struct {
	rid string
	idx int
	gen int // 0 for the first use, then 1, 2, ...
}

// requestUseSet is what requestUses found: the use of every publish op
// with a request id (by position in the history) and the answers that
// disagree with their use's first answer (G6).
type requestUseSet struct {
	use       map[int]requestSlot
	conflicts [][2]*history.Op // the use's first answer, the disagreeing one
}

// requestUses splits the publishes of each request id and message index
// into uses. A broker remembers a request id for window after it stored
// the first answer, which it did after that use's first invoke, so it
// may have forgotten the id for an op that reached it after start +
// window: an answer completed then that differs from the use's answer,
// or an Unknown answer invoked then, starts a new use. Any other
// definite answer that differs is a conflict. Unknown answers invoked
// within the window are taken to have reached the broker within it (the
// workload's calls end at their timeout). window 0 never starts a new use.
func requestUses(ops []history.Op, window, tol time.Duration) requestUseSet {
	type key struct {
		rid string
		idx int
	}
	// use is the state of one key's current use: when it began and its
	// first definite answer (nil while only Unknown ones came). prev is
	// the use before, for a new use opened by an Unknown answer whose
	// broker still answered the old outcome: that outcome's age counts
	// from the old use's start.
	type use struct {
		gen   int
		start time.Time
		ref   *history.Op
		prev  *use
	}
	out := requestUseSet{use: map[int]requestSlot{}}
	cur := map[key]*use{}
	for i := range ops {
		op := &ops[i]
		if op.Kind != history.Publish || op.RequestID == "" {
			continue
		}
		k := key{op.RequestID, op.Index}
		u := cur[k]
		if u == nil {
			u = &use{start: op.Invoke}
			cur[k] = u
		}
		forgettable := func(t time.Time) bool { return window > 0 && !t.Before(u.start.Add(window-tol)) }
		switch {
		case u.ref == nil && op.Answer != history.Unknown:
			if u.prev != nil && u.prev.ref != nil && sameAnswer(u.prev.ref, op) {
				u.start = u.prev.start
			}
			u.ref = op
		case op.Answer == history.Unknown:
			if u.ref != nil && forgettable(op.Invoke) {
				u = &use{gen: u.gen + 1, start: op.Invoke, prev: u}
				cur[k] = u
			}
		case sameAnswer(u.ref, op):
		case forgettable(op.Complete):
			u = &use{gen: u.gen + 1, start: op.Invoke, ref: op, prev: u}
			cur[k] = u
		default:
			out.conflicts = append(out.conflicts, [2]*history.Op{u.ref, op})
		}
		out.use[i] = requestSlot{op.RequestID, op.Index, u.gen}
	}
	return out
}

func sameAnswer(a, b *history.Op) bool {
	return a.Answer == b.Answer && a.MessageID == b.MessageID && a.DueMs == b.DueMs && a.Outcome == b.Outcome
}

// mergeRequests folds the publish ops of each use of a (request id,
// message index) into one: the first op's request, invoked at the
// earliest invoke, answered by the first OK answer (completed at the
// earliest OK completion), else Failed when every answer is Failed, else
// Unknown. use is requestUses' use of each op by position.
func mergeRequests(ops []history.Op, use map[int]requestSlot) map[requestSlot]*history.Op {
	out := map[requestSlot]*history.Op{}
	for i := range ops {
		op := &ops[i]
		if op.Kind != history.Publish || op.RequestID == "" {
			continue
		}
		k := use[i]
		cur, ok := out[k]
		if !ok {
			cp := *op
			out[k] = &cp
			continue
		}
		switch {
		case op.Answer == history.OK && cur.Answer != history.OK:
			seq, inv := cur.Seq, cur.Invoke
			*cur = *op
			cur.Seq, cur.Invoke = seq, inv
		case op.Answer == history.OK && op.Complete.Before(cur.Complete):
			cur.Complete = op.Complete
		case op.Answer == history.Unknown && cur.Answer == history.Failed:
			cur.Answer, cur.Complete = history.Unknown, time.Time{}
		}
	}
	return out
}

// checkRequestIDs checks G6: the conflicts requestUses found.
func (c *run) checkRequestIDs() {
	for _, p := range c.uses.conflicts {
		first, o := p[0], p[1]
		m := &message{id: first.MessageID}
		c.flag("G6", m, "", fmt.Sprintf("request %s message %d answered %s %s %q due %d, then %s %s %q due %d",
			first.RequestID, first.Index, first.Answer, first.Outcome, first.MessageID, first.DueMs, o.Answer, o.Outcome, o.MessageID, o.DueMs), first, o)
	}
}
