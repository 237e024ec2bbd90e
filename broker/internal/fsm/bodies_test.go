package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// A lease, nack, extend or ack naming distinct messages reads their bodies
// through one iterator opened as the command starts (bodyIter), in id order,
// or all of them first if the refs are in another order; it must answer and
// leave exactly what the same refs do one command each, each read through
// the batch: whatever earlier refs of the command wrote, on messages of one
// copy and of two, a dead letter among them, refs of a message that is
// gone, and a command naming one message twice (read through the batch).
func TestRefsInIDOrderActLikeOneCommandEach(t *testing.T) {
	run := func(split bool) ([]byte, string) {
		r := newReplica(t)
		r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "two", Group: DefaultGroup}}},
			&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "two", Group: "other"}}})
		var msgs []*fsmpb.StoredMessage
		for i := range 12 {
			topic := "t"
			if i%3 == 0 {
				topic = "two"
			}
			msgs = append(msgs, &fsmpb.StoredMessage{Topic: topic, Payload: fmt.Appendf(nil, "p%d", i), Key: fmt.Sprintf("k%d", i), DueAtMs: 2000})
		}
		var ids [][]byte
		for _, p := range r.apply(cmdPublish(1000, msgs...))[0].Published {
			ids = append(ids, p.MessageId)
		}
		// Every step is one entry, whether one command or one per ref, so
		// ids, indexes and forget times agree; only the reads differ.
		var codes []fsmpb.RefCode
		do := func(cmds ...*fsmpb.Command) {
			for _, out := range r.apply(cmds...) {
				codes = append(codes, out.Codes...)
			}
		}
		items := func(from, to int, attempt uint32, visibleAt, deadline int64, dead int) []*fsmpb.LeaseItem {
			var out []*fsmpb.LeaseItem
			for i := from; i < to; i++ {
				out = append(out, &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: ids[i], Group: DefaultGroup, Attempt: attempt},
					VisibleAtMs: visibleAt, DeadlineMs: deadline, DeadLetter: i == dead})
			}
			return out
		}
		refs := func(from, to int, attempt uint32) []*fsmpb.MessageRef {
			var out []*fsmpb.MessageRef
			for i := from; i < to; i++ {
				out = append(out, &fsmpb.MessageRef{MessageId: ids[i], Group: DefaultGroup, Attempt: attempt})
			}
			return out
		}
		one := func(c *fsmpb.Command) []*fsmpb.Command { return []*fsmpb.Command{c} }
		splitItems := func(l *fsmpb.Lease) []*fsmpb.Command {
			if !split {
				return one(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: l}})
			}
			var cmds []*fsmpb.Command
			for _, it := range l.Items {
				cmds = append(cmds, &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: l.NowMs, Items: []*fsmpb.LeaseItem{it}}}})
			}
			return cmds
		}
		splitRefs := func(rs []*fsmpb.MessageRef, mk func([]*fsmpb.MessageRef) *fsmpb.Command) []*fsmpb.Command {
			if !split {
				return one(mk(rs))
			}
			var cmds []*fsmpb.Command
			for _, ref := range rs {
				cmds = append(cmds, mk([]*fsmpb.MessageRef{ref}))
			}
			return cmds
		}
		ack := func(rs []*fsmpb.MessageRef) *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: rs, NowMs: 3000}}}
		}
		// Lease all but the last (message 4 dead-lettered), in one entry.
		do(splitItems(&fsmpb.Lease{NowMs: 2000, Items: items(0, 11, 0, 2000, 5000, 4)})...)
		do(splitRefs(refs(0, 4, 1), func(rs []*fsmpb.MessageRef) *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Refs: rs, DeadlineMs: 9000}}}
		})...)
		do(splitRefs(refs(5, 8, 1), func(rs []*fsmpb.MessageRef) *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Refs: rs, VisibleAtMs: 2500, Reason: "r"}}}
		})...)
		// Extends out of id order, and one naming a message twice.
		do(splitRefs(reorder(refs(0, 4, 1), 3, 1, 0, 2), func(rs []*fsmpb.MessageRef) *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Refs: rs, DeadlineMs: 9500}}}
		})...)
		do(splitRefs(reorder(refs(8, 11, 1), 0, 2, 0, 1), func(rs []*fsmpb.MessageRef) *fsmpb.Command {
			return &fsmpb.Command{Kind: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Refs: rs, DeadlineMs: 9600}}}
		})...)
		// Acks of every message in the order consumers might send them:
		// the dead letter's and the last are gone or not leased, the
		// nacked ones stale; then acks naming one message twice.
		do(splitRefs(reorder(refs(0, 12, 1), 7, 2, 9, 0, 11, 5, 3, 1, 10, 4, 6), ack)...)
		do(splitRefs(reorder(refs(0, 12, 1), 8, 8), ack)...)
		return r.hash(), fmt.Sprint(codes)
	}
	batched, batchedLog := run(false)
	split, splitLog := run(true)
	if !bytes.Equal(batched, split) {
		t.Fatalf("state after commands of many refs = %x, after one command per ref = %x; want equal", batched, split)
	}
	if batchedLog != splitLog {
		t.Fatalf("codes of commands of many refs = %s, of one command per ref = %s; want equal", batchedLog, splitLog)
	}
}

// reorder returns rs[at[0]], rs[at[1]], ….
func reorder(rs []*fsmpb.MessageRef, at ...int) []*fsmpb.MessageRef {
	out := make([]*fsmpb.MessageRef, len(at))
	for i, j := range at {
		out[i] = rs[j]
	}
	return out
}
