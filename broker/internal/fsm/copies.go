package fsm

import (
	"strconv"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/proto/receipt"
)

// lease leases each item's copy if it is still as the round saw it: the
// same attempt and visible_at and, for a delivery, the same content version
// as the body the round read its payload from. A dead letter is built from
// the body at apply time, so it names no version.
func (a *applier) lease(l *fsmpb.Lease) (*fsmpb.Outcome, error) {
	out := &fsmpb.Outcome{Codes: make([]fsmpb.RefCode, 0, len(l.Items))}
	for _, item := range l.Items {
		ref := item.GetRef()
		cs, err := a.copyState(ref.GetMessageId(), ref.GetGroup())
		if err != nil {
			return nil, err
		}
		switch {
		case cs == nil:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_NOT_FOUND)
			continue
		case cs.Attempt != ref.Attempt || cs.VisibleAtMs != item.VisibleAtMs:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_STALE)
			continue
		case !item.DeadLetter && cs.Version != item.Version:
			// Rewritten since the round read the payload it delivers.
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_STALE)
			continue
		}
		switch {
		case item.DeadLetter:
			err = a.deadLetter(ref, cs, l.NowMs)
		case item.Remove:
			err = a.dropCopy(ref.MessageId, ref.Group, cs, l.NowMs, fsmpb.EndState_END_STATE_DELIVERED)
		default:
			if !cs.Leased {
				c, cerr := a.counter(cs.Topic, ref.Group)
				if cerr != nil {
					return nil, cerr
				}
				c.InFlight++
			}
			cs.Attempt++
			err = a.moveTo(ref.MessageId, ref.Group, cs, item.DeadlineMs, true)
		}
		if err != nil {
			return nil, err
		}
		out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_OK)
	}
	return out, nil
}

// forEachRef validates each ref against its copy's current lease and runs
// fn on the valid ones.
func (a *applier) forEachRef(refs []*fsmpb.MessageRef, fn func(int, *fsmpb.MessageRef, *fsmpb.CopyState) error) (*fsmpb.Outcome, error) {
	out := &fsmpb.Outcome{Codes: make([]fsmpb.RefCode, 0, len(refs))}
	for i, ref := range refs {
		cs, err := a.copyState(ref.GetMessageId(), ref.GetGroup())
		if err != nil {
			return nil, err
		}
		switch {
		case cs == nil:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_NOT_FOUND)
		case cs.Attempt != ref.Attempt || !cs.Leased:
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_STALE)
		default:
			if err := fn(i, ref, cs); err != nil {
				return nil, err
			}
			out.Codes = append(out.Codes, fsmpb.RefCode_REF_CODE_OK)
		}
	}
	return out, nil
}

// moveTo re-indexes a copy at visibleAtMs; leased says whether it stays
// leased until then (lease, extend) or becomes visible then (nack).
func (a *applier) moveTo(id []byte, group string, cs *fsmpb.CopyState, visibleAtMs int64, leased bool) error {
	if err := a.unindex(id, group, cs); err != nil {
		return err
	}
	if cs.Leased && !leased {
		c, err := a.counter(cs.Topic, group)
		if err != nil {
			return err
		}
		c.InFlight--
	}
	cs.VisibleAtMs, cs.Leased = visibleAtMs, leased
	return a.putCopy(id, group, cs)
}

// dropCopy removes a group's copy and, with the last copy, the body; end
// says how the message ended (unspecified for a purge: nothing remembered).
func (a *applier) dropCopy(id []byte, group string, cs *fsmpb.CopyState, nowMs int64, end fsmpb.EndState) error {
	if err := a.unindex(id, group, cs); err != nil {
		return err
	}
	if err := a.b.Delete(keys.Copy(a.shard, id, group), nil); err != nil {
		return err
	}
	c, err := a.counter(cs.Topic, group)
	if err != nil {
		return err
	}
	c.Pending--
	if cs.Leased {
		c.InFlight--
	}
	bodyKey := keys.Message(a.shard, id)
	var body fsmpb.StoredMessage
	found, err := a.get(bodyKey, &body)
	if err != nil || !found {
		return err
	}
	if body.GroupsPending > 1 {
		body.GroupsPending--
		return a.put(bodyKey, &body)
	}
	return a.dropBody(id, &body, nowMs, end)
}

// dropBody deletes a message whose last copy went and remembers how it
// ended for the topic's dedup window.
func (a *applier) dropBody(id []byte, body *fsmpb.StoredMessage, nowMs int64, end fsmpb.EndState) error {
	if err := a.b.Delete(keys.Message(a.shard, id), nil); err != nil {
		return err
	}
	if body.ExpiresAtMs != 0 {
		if err := a.b.Delete(keys.Expiry(a.shard, body.ExpiresAtMs, id), nil); err != nil {
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
				if err := a.b.Set(keys.Forget(a.shard, forgetAt, keys.ForgetKey, keys.Tail(keyKey)), nil, nil); err != nil {
					return err
				}
			} else if err := a.b.Delete(keyKey, nil); err != nil {
				return err
			}
		}
	}
	if !remember {
		return nil
	}
	endKey := keys.End(a.shard, id)
	if err := a.put(endKey, &fsmpb.EndRecord{End: end, ForgetAtMs: forgetAt}); err != nil {
		return err
	}
	return a.b.Set(keys.Forget(a.shard, forgetAt, keys.ForgetEnd, keys.Tail(endKey)), nil, nil)
}

// deadLetter moves a copy that used up its attempts to the topic's
// dead-letter topic, as a new message on the same shard and partition.
func (a *applier) deadLetter(ref *fsmpb.MessageRef, cs *fsmpb.CopyState, nowMs int64) error {
	var body fsmpb.StoredMessage
	found, err := a.get(keys.Message(a.shard, ref.MessageId), &body)
	if err != nil || !found {
		return err
	}
	orig, _ := receipt.MessageIDFromBytes(ref.MessageId)
	headers := make(map[string]string, len(body.Headers)+5)
	for k, v := range body.Headers {
		headers[k] = v
	}
	headers[HeaderOriginalTopic] = body.Topic
	headers[HeaderOriginalGroup] = ref.Group
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
	c, err := a.counter(cs.Topic, ref.Group)
	if err != nil {
		return err
	}
	c.DeadLettered++
	return a.dropCopy(ref.MessageId, ref.Group, cs, nowMs, fsmpb.EndState_END_STATE_DEAD_LETTERED)
}

// unindex deletes a copy's due-index entry (and fair-index entry).
func (a *applier) unindex(id []byte, group string, cs *fsmpb.CopyState) error {
	q := keys.Queue{Topic: cs.Topic, Partition: cs.Partition, Group: group}
	if err := a.b.Delete(keys.Due(a.shard, q, cs.VisibleAtMs, cs.Priority, id), nil); err != nil {
		return err
	}
	if cs.Fair {
		return a.b.Delete(keys.Fair(a.shard, q, cs.FairnessKey, cs.VisibleAtMs, cs.Priority, id), nil)
	}
	return nil
}

// putCopy writes a copy state and its due-index entry (and fair-index
// entry).
func (a *applier) putCopy(id []byte, group string, cs *fsmpb.CopyState) error {
	if err := a.put(keys.Copy(a.shard, id, group), cs); err != nil {
		return err
	}
	q := keys.Queue{Topic: cs.Topic, Partition: cs.Partition, Group: group}
	if low, ok := a.lows[q]; !ok || cs.VisibleAtMs < low {
		a.lows[q] = cs.VisibleAtMs
	}
	v := keys.DueValue(cs.Attempt, cs.Leased)
	if cs.Fair {
		if err := a.b.Set(keys.Fair(a.shard, q, cs.FairnessKey, cs.VisibleAtMs, cs.Priority, id), v, nil); err != nil {
			return err
		}
	}
	return a.b.Set(keys.Due(a.shard, q, cs.VisibleAtMs, cs.Priority, id), v, nil)
}

func (a *applier) copyState(id []byte, group string) (*fsmpb.CopyState, error) {
	if len(id) != keys.IDBytes {
		return nil, nil
	}
	var cs fsmpb.CopyState
	found, err := a.get(keys.Copy(a.shard, id, group), &cs)
	if err != nil || !found {
		return nil, err
	}
	return &cs, nil
}

// copies returns every group's copy state of a message, by group order.
func (a *applier) copies(id []byte) (groups []string, states []*fsmpb.CopyState, err error) {
	prefix := keys.CopyPrefix(a.shard, id)
	ks, err := a.scanKeys(prefix, keys.PrefixEnd(prefix), 0, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range ks {
		var cs fsmpb.CopyState
		if _, err := a.get(k, &cs); err != nil {
			return nil, nil, err
		}
		groups = append(groups, keys.GroupOfCopy(k))
		states = append(states, &cs)
	}
	return groups, states, nil
}
