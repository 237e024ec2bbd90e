package fsm

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/proto/receipt"
)

// groupCopy is one group's copy of a message as a command read it, with
// the body it belongs to (see inline.go for the two forms). Copies of one
// message read together share the body, so what one of them changes in it
// (groups_pending, an inline copy) the next sees.
type groupCopy struct {
	id    []byte
	group string
	cs    *fsmpb.CopyState
	// body is the decoded body; nil for an inline copy read for a rewrite
	// by scanning its encoding (scanInline), until message decodes head.
	body *fsmpb.StoredMessage
	// head, for an inline copy read for a rewrite, is the body's encoding
	// without the copy fields, as read: putCopy appends the copy to it
	// instead of encoding the whole body again. Whoever changes another
	// field of the body clears it.
	head []byte
	// end, for an inline copy read for an ack (readForDrop), is what
	// deleting its body needs; such a copy has neither body nor head.
	end *bodyEnd
}

// inline says the copy lives in its body.
func (c *groupCopy) inline() bool { return c.head != nil || c.end != nil || c.body.InlineGroup != "" }

// message is the copy's body, decoded from head if it was read by scanning.
// A copy read for an ack has no body to give.
func (c *groupCopy) message() (*fsmpb.StoredMessage, error) {
	if c.body == nil && c.head == nil {
		return nil, errors.New("fsm: copy read for an ack has no body")
	}
	if c.body == nil {
		body := &fsmpb.StoredMessage{}
		if err := proto.Unmarshal(c.head, body); err != nil {
			return nil, fmt.Errorf("decode %T: %w", body, err)
		}
		setInline(body, c.cs)
		c.body = body
	}
	return c.body, nil
}

// lease leases each item's copy if it is still as the round saw it: the
// same attempt and visible_at and, for a delivery, the same content version
// as the body the round read its payload from. A dead letter is built from
// the body at apply time, so it names no version.
func (a *applier) lease(l *fsmpb.Lease) (_ *fsmpb.Outcome, err error) {
	bodies, err := a.bodiesOf(len(l.Items), func(i int) []byte { return l.Items[i].GetRef().GetMessageId() })
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, bodies.close()) }()
	out := &fsmpb.Outcome{Codes: make([]fsmpb.RefCode, 0, len(l.Items))}
	for _, item := range l.Items {
		ref := item.GetRef()
		mode := readForRewrite
		if item.Remove || item.DeadLetter {
			mode = readDecoded
		}
		c, err := a.copyOf(bodies, ref.GetMessageId(), ref.GetGroup(), mode)
		if err != nil {
			return nil, err
		}
		switch {
		case c == nil:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_NOT_FOUND)
			continue
		case c.cs.Attempt != ref.Attempt || c.cs.VisibleAtMs != item.VisibleAtMs:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_STALE)
			continue
		case !item.DeadLetter && c.cs.Version != item.Version:
			// Rewritten since the round read the payload it delivers.
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_STALE)
			continue
		}
		switch {
		case item.DeadLetter:
			err = a.deadLetter(c, l.NowMs)
		case item.Remove:
			err = a.dropCopy(c, l.NowMs, fsmpb.EndState_END_STATE_DELIVERED)
		default:
			if !c.cs.Leased {
				counter, cerr := a.counter(c.cs.Topic, c.group)
				if cerr != nil {
					return nil, cerr
				}
				counter.InFlight++
			}
			c.cs.Attempt++
			err = a.moveTo(c, item.DeadlineMs, true)
		}
		if err != nil {
			return nil, err
		}
		out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_OK)
	}
	return out, nil
}

// forEachRef validates each ref against its copy's current lease and runs
// fn on the valid ones; mode says what fn does with the copy (see readMode).
func (a *applier) forEachRef(refs []*fsmpb.MessageRef, mode readMode, fn func(int, *groupCopy) error) (_ *fsmpb.Outcome, err error) {
	bodies, err := a.bodiesOf(len(refs), func(i int) []byte { return refs[i].GetMessageId() })
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, bodies.close()) }()
	out := &fsmpb.Outcome{Codes: make([]fsmpb.RefCode, 0, len(refs))}
	for i, ref := range refs {
		c, err := a.copyOf(bodies, ref.GetMessageId(), ref.GetGroup(), mode)
		if err != nil {
			return nil, err
		}
		switch {
		case c == nil:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_NOT_FOUND)
		case c.cs.Attempt != ref.Attempt || !c.cs.Leased:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_STALE)
		default:
			if err := fn(i, c); err != nil {
				return nil, err
			}
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_OK)
		}
	}
	return out, nil
}

// moveTo re-indexes a copy at visibleAtMs; leased says whether it stays
// leased until then (lease, extend) or becomes visible then (nack).
func (a *applier) moveTo(c *groupCopy, visibleAtMs int64, leased bool) error {
	if err := a.unindex(c); err != nil {
		return err
	}
	if c.cs.Leased && !leased {
		counter, err := a.counter(c.cs.Topic, c.group)
		if err != nil {
			return err
		}
		counter.InFlight--
	}
	c.cs.VisibleAtMs, c.cs.Leased = visibleAtMs, leased
	return a.putCopy(c)
}

// dropCopy removes a group's copy and, with the last copy, the body; end
// says how the message ended (unspecified for a purge: nothing remembered).
func (a *applier) dropCopy(c *groupCopy, nowMs int64, end fsmpb.EndState) error {
	if err := a.unindex(c); err != nil {
		return err
	}
	if !c.inline() {
		if err := a.del(keys.Copy(a.shard, c.id, c.group)); err != nil {
			return err
		}
	}
	counter, err := a.counter(c.cs.Topic, c.group)
	if err != nil {
		return err
	}
	counter.Pending--
	if c.cs.Leased {
		counter.InFlight--
	}
	if e := c.end; e != nil {
		// Read for an ack: what dropBody reads of the body, no more.
		return a.dropBody(c.id, &fsmpb.StoredMessage{
			Topic: c.cs.Topic, ExpiresAtMs: e.expiresAtMs, Key: e.key, DedupWindowMs: e.dedupWindowMs,
		}, nowMs, end)
	}
	body, err := c.message()
	if err != nil {
		return err
	}
	if body.GroupsPending > 1 {
		body.GroupsPending--
		return a.put(keys.Message(a.shard, c.id), body)
	}
	return a.dropBody(c.id, body, nowMs, end)
}

// dropBody deletes a message whose last copy went and remembers how it
// ended for the topic's dedup window.
func (a *applier) dropBody(id []byte, body *fsmpb.StoredMessage, nowMs int64, end fsmpb.EndState) error {
	if err := a.del(keys.Message(a.shard, id)); err != nil {
		return err
	}
	if body.ExpiresAtMs != 0 {
		if err := a.del(keys.Expiry(a.shard, body.ExpiresAtMs, id)); err != nil {
			return err
		}
	}
	remember := end != fsmpb.EndState_END_STATE_PENDING && body.DedupWindowMs > 0
	forgetAt := nowMs + body.DedupWindowMs
	if body.Key != "" {
		keyKey := keys.Key(a.shard, body.Topic, body.Key)
		var rec fsmpb.KeyRecord
		found, err := a.get(keyKey, &rec)
		if err != nil {
			return err
		}
		if found && string(rec.MessageId) == string(id) {
			if remember {
				if err := a.put(keyKey, &fsmpb.KeyRecord{MessageId: id, End: end, ForgetAtMs: forgetAt}); err != nil {
					return err
				}
				if err := a.set(keys.Forget(a.shard, forgetAt, keys.ForgetKey, keys.Tail(keyKey)), nil); err != nil {
					return err
				}
			} else if err := a.del(keyKey); err != nil {
				return err
			}
		}
	}
	if !remember {
		return nil
	}
	if err := a.put(keys.End(a.shard, id), &fsmpb.EndRecord{End: end, ForgetAtMs: forgetAt}); err != nil {
		return err
	}
	if a.endsAt == nil {
		a.endsAt = map[int64][]byte{}
	}
	a.endsAt[forgetAt] = append(a.endsAt[forgetAt], id...) // indexed by flushEnds
	return nil
}

// deadLetter moves a copy that used up its attempts to the topic's
// dead-letter topic, as a new message on the same shard and partition.
func (a *applier) deadLetter(c *groupCopy, nowMs int64) error {
	body, err := c.message()
	if err != nil {
		return err
	}
	cs := c.cs
	orig, _ := receipt.MessageIDFromBytes(c.id)
	headers := make(map[string]string, len(body.Headers)+5)
	for k, v := range body.Headers {
		headers[k] = v
	}
	headers[HeaderOriginalTopic] = body.Topic
	headers[HeaderOriginalGroup] = c.group
	headers[HeaderOriginalID] = orig.String()
	headers[HeaderAttempts] = strconv.FormatUint(uint64(cs.Attempt), 10)
	switch {
	case cs.Leased: // the last attempt ran out its lease
		headers[HeaderReason] = "lease expired without an ack"
	case cs.Reason == "":
		headers[HeaderReason] = "nacked"
	default:
		headers[HeaderReason] = cs.Reason
	}
	if body.Fair {
		headers[HeaderOriginalFair] = "1"
	}
	dead := &fsmpb.StoredMessage{
		Topic: body.Topic + DLQSuffix, Partition: body.Partition, Payload: body.Payload, Headers: headers,
		PublishedAtMs: nowMs, DueAtMs: nowMs, FairnessKey: body.FairnessKey, Priority: body.Priority,
		DedupWindowMs: body.DedupWindowMs,
	}
	if _, err := a.store(dead); err != nil {
		return err
	}
	counter, err := a.counter(cs.Topic, c.group)
	if err != nil {
		return err
	}
	counter.DeadLettered++
	return a.dropCopy(c, nowMs, fsmpb.EndState_END_STATE_DEAD_LETTERED)
}

// unindex deletes a copy's due-index entry (and fair-index entry).
func (a *applier) unindex(c *groupCopy) error {
	cs := c.cs
	q := keys.Queue{Topic: cs.Topic, Partition: cs.Partition, Group: c.group}
	if err := a.del(keys.Due(a.shard, q, cs.VisibleAtMs, cs.Priority, c.id)); err != nil {
		return err
	}
	if cs.Fair {
		return a.del(keys.Fair(a.shard, q, cs.FairnessKey, cs.VisibleAtMs, cs.Priority, c.id))
	}
	return nil
}

// putCopy writes a copy's state, into its body if it is inline (the body
// is written whole), and its due-index entry (and fair-index entry).
func (a *applier) putCopy(c *groupCopy) error {
	cs := c.cs
	var err error
	switch {
	case c.head != nil:
		if c.body != nil {
			setInline(c.body, cs)
		}
		err = a.set(keys.Message(a.shard, c.id), appendInline(c.head, cs))
	case c.inline():
		setInline(c.body, cs)
		err = a.put(keys.Message(a.shard, c.id), c.body)
	default:
		err = a.put(keys.Copy(a.shard, c.id, c.group), cs)
	}
	if err != nil {
		return err
	}
	q := keys.Queue{Topic: cs.Topic, Partition: cs.Partition, Group: c.group}
	if low, ok := a.lows[q]; !ok || cs.VisibleAtMs < low {
		a.lows[q] = cs.VisibleAtMs
	}
	v := keys.DueValue(cs.Attempt, cs.Leased)
	if cs.Fair {
		if err := a.set(keys.Fair(a.shard, q, cs.FairnessKey, cs.VisibleAtMs, cs.Priority, c.id), v); err != nil {
			return err
		}
	}
	return a.set(keys.Due(a.shard, q, cs.VisibleAtMs, cs.Priority, c.id), v)
}

// copyOf reads group's copy of message id; nil if it is gone. mode says
// what the command does with it: readForRewrite if it may write the copy
// back (lease, nack, extend), so an inline copy keeps its body's head for
// putCopy; readForDrop if it only deletes it (ack). The body is read
// through bodies if not nil.
func (a *applier) copyOf(bodies *bodyIter, id []byte, group string, mode readMode) (*groupCopy, error) {
	var g getter
	if bodies != nil {
		g = bodies
	}
	c, err := readCopy(a.b, g, a.shard, id, group, mode)
	if err != nil || c == nil || c.cs == nil {
		return nil, err
	}
	if c.body != nil {
		a.decoded++
	}
	return c, nil
}

// copies reads message id's body and every group's copy of it, in group
// order; a nil body (and no copies) if the message is gone.
func (a *applier) copies(id []byte) (*fsmpb.StoredMessage, []*groupCopy, error) {
	body := &fsmpb.StoredMessage{}
	if found, err := a.get(keys.Message(a.shard, id), body); err != nil || !found {
		return nil, nil, err
	}
	cps, err := a.copiesOf(id, body)
	return body, cps, err
}

// copiesOf returns every group's copy of message id, whose body is body,
// in group order; they share body.
func (a *applier) copiesOf(id []byte, body *fsmpb.StoredMessage) ([]*groupCopy, error) {
	groups, states, err := Copies(a.b, a.shard, id, body)
	if err != nil {
		return nil, err
	}
	cps := make([]*groupCopy, len(states))
	for i, cs := range states {
		cps[i] = &groupCopy{id: id, group: groups[i], cs: cs, body: body}
	}
	return cps, nil
}
