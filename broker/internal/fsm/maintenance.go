package fsm

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// DefaultSweepLimit bounds the records one sweep forgets when its command
// names no limit.
const DefaultSweepLimit = 1024

// sweep forgets up to limit records in all: dedup records applied
// before before_ms, then key and end records whose own forget time is at or
// before now_ms. more says records are left for another sweep. The limit
// counts records deleted, not forget-index entries: an entry that forgets
// the end records of many messages (keys.ForgetEnds) spends one per
// message, and one larger than what is left of the limit is forgotten in
// part, keeping the rest of its ids for the next sweep, so one apply
// deletes at most about limit records however many messages an entry ended.
func (a *applier) sweep(s *fsmpb.Sweep) (*fsmpb.Outcome, error) {
	limit := int(s.Limit)
	if limit == 0 {
		limit = DefaultSweepLimit
	}
	nowMs := s.NowMs
	if nowMs == 0 {
		// An entry proposed before now_ms existed forgets by before_ms, as
		// it did when it was proposed.
		nowMs = s.BeforeMs - 1
	}
	lower, upper := keys.DedupAtRange(a.shard, s.BeforeMs)
	doomed, err := a.scanKeys(lower, upper, limit+1, nil)
	if err != nil {
		return nil, err
	}
	more := len(doomed) > limit
	doomed = doomed[:min(len(doomed), limit)]
	for _, k := range doomed {
		if err := a.del(keys.Dedup(a.shard, keys.DedupRequestID(k))); err != nil {
			return nil, err
		}
		if err := a.del(k); err != nil {
			return nil, err
		}
	}
	if more {
		return &fsmpb.Outcome{More: true}, nil
	}
	left := limit - len(doomed)
	lower, upper = keys.ForgetUntil(a.shard, nowMs)
	// Every entry spends at least one of what is left, so left+1 entries
	// are more than this sweep can forget.
	if doomed, err = a.scanKeys(lower, upper, left+1, nil); err != nil {
		return nil, err
	}
	for _, k := range doomed {
		if left == 0 {
			return &fsmpb.Outcome{More: true}, nil
		}
		spent, done, err := a.forget(k, left)
		if err != nil {
			return nil, err
		}
		if !done {
			return &fsmpb.Outcome{More: true}, nil
		}
		left -= spent
	}
	return &fsmpb.Outcome{}, nil
}

// forget deletes the key or end records forget-index entry k points at,
// at most budget (≥ 1) of them, and the entry once none is left. spent is
// the records it deleted, at least 1 (an entry whose record was reused
// costs one too); done is false when a ForgetEnds entry kept ids for
// later: its value is rewritten with the ids not forgotten yet.
func (a *applier) forget(k []byte, budget int) (spent int, done bool, err error) {
	at, kind, rest, err := keys.ParseForget(k)
	if err != nil {
		return 0, false, err
	}
	if kind == keys.ForgetEnds {
		v, closer, err := a.b.Get(k)
		if err != nil {
			return 0, false, err
		}
		ids := slices.Clone(v)
		closer.Close()
		n := min(len(ids)/keys.IDBytes, budget)
		for i := range n {
			if err := a.del(keys.End(a.shard, ids[i*keys.IDBytes:(i+1)*keys.IDBytes])); err != nil {
				return 0, false, err
			}
		}
		if kept := ids[n*keys.IDBytes:]; len(kept) >= keys.IDBytes {
			return n, false, a.set(k, kept)
		}
		return max(n, 1), true, a.del(k)
	}
	if err := a.del(k); err != nil {
		return 0, false, err
	}
	switch kind {
	case keys.ForgetKey:
		// The record may have been reused since (a key's new message):
		// forget it only if it still ends at this time.
		rk := keys.FromTail(a.shard, keys.TagKey, rest)
		var rec fsmpb.KeyRecord
		if found, err := a.get(rk, &rec); err != nil || !found {
			return 1, true, err
		} else if rec.End != fsmpb.EndState_END_STATE_PENDING && rec.ForgetAtMs == at {
			return 1, true, a.del(rk)
		}
	case keys.ForgetEnd:
		return 1, true, a.del(keys.FromTail(a.shard, keys.TagEnd, rest))
	}
	return 1, true, nil
}

// change cancels or reschedules one message and answers definitely. A
// request id applied before answers the first outcome and changes nothing,
// so a retry of a change by key cannot change a message published under
// the key since (G6); a record of another request under the id (a
// publish's, or a change's with another digest) answers RequestIdReused.
// Digests are compared exactly: every change record has one.
func (a *applier) change(c *fsmpb.Change) (*fsmpb.Outcome, error) {
	if c.RequestId != "" {
		var rec fsmpb.DedupRecord
		found, err := a.get(keys.Dedup(a.shard, c.RequestId), &rec)
		if err != nil {
			return nil, err
		}
		if found {
			if rec.GetOutcome().GetChange() == nil || !bytes.Equal(rec.Digest, c.Digest) {
				return &fsmpb.Outcome{RequestIdReused: true}, nil
			}
			return rec.Outcome, nil
		}
	}
	out, err := a.changeMessage(c)
	if err != nil || c.RequestId == "" {
		return out, err
	}
	return out, a.remember(c.RequestId, c.NowMs, c.Digest, out)
}

// changeMessage applies c to the message it names.
func (a *applier) changeMessage(c *fsmpb.Change) (*fsmpb.Outcome, error) {
	answer := func(code fsmpb.ChangeCode, id []byte, due int64) (*fsmpb.Outcome, error) {
		return &fsmpb.Outcome{Change: &fsmpb.ChangeResult{Code: code, MessageId: id, DueAtMs: due}}, nil
	}
	id := c.MessageId
	if len(id) == 0 {
		var rec fsmpb.KeyRecord
		found, err := a.get(keys.Key(a.shard, c.Topic, c.Key), &rec)
		if err != nil {
			return nil, err
		}
		if !found || (rec.End != fsmpb.EndState_END_STATE_PENDING && rec.ForgetAtMs <= c.NowMs) {
			return answer(fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, nil, 0)
		}
		if rec.End != fsmpb.EndState_END_STATE_PENDING {
			return answer(endCode(rec.End, c.Cancel), rec.MessageId, 0)
		}
		id = rec.MessageId
	}
	if len(id) != keys.IDBytes {
		return answer(fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, nil, 0)
	}
	var body fsmpb.StoredMessage
	found, err := a.get(keys.Message(a.shard, id), &body)
	if err != nil {
		return nil, err
	}
	if found && c.Topic != "" && body.Topic != c.Topic {
		return answer(fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, id, 0)
	}
	if !found {
		var end fsmpb.EndRecord
		if ok, err := a.get(keys.End(a.shard, id), &end); err != nil {
			return nil, err
		} else if ok && end.ForgetAtMs > c.NowMs {
			return answer(endCode(end.End, c.Cancel), id, 0)
		}
		return answer(fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND, id, 0)
	}
	cps, err := a.copiesOf(id, &body)
	if err != nil {
		return nil, err
	}
	for _, cp := range cps {
		if cp.cs.Leased {
			return answer(fsmpb.ChangeCode_CHANGE_CODE_IN_FLIGHT, id, body.DueAtMs)
		}
	}
	if c.Cancel {
		for _, cp := range cps {
			if err := a.dropCopy(cp, c.NowMs, fsmpb.EndState_END_STATE_CANCELLED); err != nil {
				return nil, err
			}
		}
		return answer(fsmpb.ChangeCode_CHANGE_CODE_DONE, id, 0)
	}
	m := &fsmpb.StoredMessage{Payload: body.Payload, Headers: body.Headers, FairnessKey: body.FairnessKey, Priority: body.Priority, DueAtMs: body.DueAtMs, ExpiresAtMs: body.ExpiresAtMs}
	if err := a.rewrite(id, &body, m, c.DueAtMs, cps); err != nil {
		return nil, err
	}
	return answer(fsmpb.ChangeCode_CHANGE_CODE_DONE, id, c.DueAtMs)
}

// endCode answers a change of a message that ended already.
func endCode(end fsmpb.EndState, cancel bool) fsmpb.ChangeCode {
	switch end {
	case fsmpb.EndState_END_STATE_DELIVERED, fsmpb.EndState_END_STATE_DEAD_LETTERED:
		return fsmpb.ChangeCode_CHANGE_CODE_ALREADY_DELIVERED
	case fsmpb.EndState_END_STATE_CANCELLED:
		if cancel {
			return fsmpb.ChangeCode_CHANGE_CODE_DONE // a retried cancel
		}
	}
	return fsmpb.ChangeCode_CHANGE_CODE_NOT_FOUND
}

// group registers a group on a topic, or removes it and up to limit of its
// copies. A removal that names no group removes the whole topic from the
// shard (see forgetTopic).
func (a *applier) group(g *fsmpb.Group) (*fsmpb.Outcome, error) {
	defer delete(a.groupsOf, g.Topic)
	if !g.Delete {
		if _, err := a.groups(g.Topic); err != nil { // the default group comes first
			return nil, err
		}
		return &fsmpb.Outcome{}, a.set(keys.Group(a.shard, g.Topic, g.Group), nil)
	}
	if g.Group == "" {
		return a.forgetTopic(g.Topic, g.Limit)
	}
	if err := a.del(keys.Group(a.shard, g.Topic, g.Group)); err != nil {
		return nil, err
	}
	n, err := a.dropTopicCopies(g.Topic, g.Group, g.Limit, 0)
	if err != nil || (g.Limit > 0 && n == g.Limit) {
		return &fsmpb.Outcome{Count: n}, err
	}
	// The last copy went: the group's counters go too, so a group created
	// again under the name starts at zero.
	delete(a.counters, counterKey{g.Topic, g.Group})
	return &fsmpb.Outcome{Count: n}, a.del(keys.Counter(a.shard, g.Topic, g.Group))
}

// forgetTopic removes a deleted topic from the shard, up to limit records
// in all (0: no bound): its copies first, then its key records, counters,
// group registrations and hand-over fences, so a topic created again under
// the name starts with the default group only, zero counters, no
// remembered keys and no fenced partition. count
// is the copies removed; more says records are left for another command.
func (a *applier) forgetTopic(topic string, limit uint32) (*fsmpb.Outcome, error) {
	n, err := a.dropTopicCopies(topic, "", limit, 0)
	if err != nil {
		return nil, err
	}
	out := &fsmpb.Outcome{Count: n}
	bounded, left := limit > 0, int(limit)-int(n)
	if bounded && left == 0 {
		out.More = true
		return out, nil
	}
	counters := keys.CounterPrefix(a.shard, topic)
	for _, prefix := range [][]byte{keys.KeyPrefix(a.shard, topic, ""), counters, keys.GroupPrefix(a.shard, topic), keys.FencePrefix(a.shard, topic)} {
		scan := 0
		if bounded {
			scan = left + 1
		}
		ks, err := a.scanKeys(prefix, keys.PrefixEnd(prefix), scan, nil)
		if err != nil {
			return nil, err
		}
		if bounded && len(ks) > left {
			ks, out.More = ks[:left], true
		}
		for _, k := range ks {
			if err := a.del(k); err != nil {
				return nil, err
			}
			if bytes.Equal(prefix, counters) {
				// The run writes the counters it loaded when it ends.
				delete(a.counters, counterKey{topic, string(k[len(counters):])})
			}
		}
		if out.More {
			return out, nil
		}
		left -= len(ks)
	}
	for k := range a.counters { // loaded and not stored yet; order does not matter
		if k.topic == topic {
			delete(a.counters, k)
		}
	}
	return out, nil
}

// purge removes up to limit pending copies of a topic, or of one group.
func (a *applier) purge(p *fsmpb.Purge) (*fsmpb.Outcome, error) {
	n, err := a.dropTopicCopies(p.Topic, p.Group, p.Limit, p.NowMs)
	return &fsmpb.Outcome{Count: n}, err
}

// dropTopicCopies removes up to limit copies of topic (of group, if set),
// remembering nothing about them.
func (a *applier) dropTopicCopies(topic, group string, limit uint32, nowMs int64) (uint32, error) {
	var ks [][]byte
	var err error
	if group == "" {
		prefix := keys.TopicDuePrefix(a.shard, topic)
		ks, err = a.scanKeys(prefix, keys.PrefixEnd(prefix), int(limit), nil)
	} else {
		ks, err = a.groupDueKeys(topic, group, int(limit))
	}
	if err != nil {
		return 0, err
	}
	var n uint32
	for _, k := range ks {
		q, e, err := keys.ParseTopicDue(a.shard, topic, k)
		if err != nil {
			return n, err
		}
		c, err := a.copyOf(nil, e.ID, q.Group, readDecoded)
		if err != nil || c == nil {
			return n, err
		}
		if err := a.dropCopy(c, nowMs, fsmpb.EndState_END_STATE_PENDING); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// groupDueKeys returns up to limit (0: all) due-index keys of one group of
// topic. Each partition's keys are ordered by group, so it seeks into the
// group's range of every partition present: it visits the group's own keys
// and a few per partition, however many copies other groups hold.
func (a *applier) groupDueKeys(topic, group string, limit int) ([][]byte, error) {
	prefix := keys.TopicDuePrefix(a.shard, topic)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for valid := it.First(); valid && (limit == 0 || len(out) < limit); {
		a.visited++
		part, err := keys.PartitionOfTopicDue(a.shard, topic, it.Key())
		if err != nil {
			return nil, errors.Join(err, it.Close())
		}
		q := keys.QueuePrefix(a.shard, keys.Queue{Topic: topic, Partition: part, Group: group})
		for valid = it.SeekGE(q); valid && bytes.HasPrefix(it.Key(), q) && (limit == 0 || len(out) < limit); valid = it.Next() {
			a.visited++
			out = append(out, slices.Clone(it.Key()))
		}
		if part == math.MaxUint32 {
			break
		}
		valid = it.SeekGE(keys.PartitionDuePrefix(a.shard, topic, part+1))
	}
	return out, errors.Join(it.Error(), it.Close())
}

// redrive moves up to limit dead letters of topic.dlq back to topic, each
// for the group it was dead-lettered from. Dead letters leased by a reader
// and dead letters that name no origin stay in the DLQ and do not count
// toward the limit.
func (a *applier) redrive(r *fsmpb.Redrive) (*fsmpb.Outcome, error) {
	dlq := r.Topic + DLQSuffix
	prefix := keys.TopicDuePrefix(a.shard, dlq)
	seen := map[string]bool{} // one entry per dead letter, whatever its groups
	var checkErr error
	ks, err := a.scanKeys(prefix, keys.PrefixEnd(prefix), int(r.Limit), func(k []byte) bool {
		_, e, err := keys.ParseTopicDue(a.shard, dlq, k)
		if err != nil {
			return true // surfaces below
		}
		if seen[string(e.ID)] || checkErr != nil {
			return false
		}
		seen[string(e.ID)] = true
		ok, err := a.redrivable(e.ID)
		checkErr = err
		return ok
	})
	if err = errors.Join(err, checkErr); err != nil {
		return nil, err
	}
	var n uint32
	for _, k := range ks {
		_, e, err := keys.ParseTopicDue(a.shard, dlq, k)
		if err != nil {
			return nil, err
		}
		body, cps, err := a.copies(e.ID)
		if err != nil {
			return nil, err
		}
		if body == nil {
			continue // gone since the scan: nothing to move
		}
		if err := a.restore(body, r.NowMs); err != nil {
			return nil, err
		}
		for _, c := range cps {
			if err := a.dropCopy(c, r.NowMs, fsmpb.EndState_END_STATE_PENDING); err != nil {
				return nil, err
			}
		}
		n++
	}
	return &fsmpb.Outcome{Count: n}, nil
}

// redrivable says whether a dead letter can go back now: it names the topic
// and group it came from, and no reader of the DLQ holds it.
func (a *applier) redrivable(id []byte) (bool, error) {
	body, cps, err := a.copies(id)
	if err != nil || body == nil {
		return false, err
	}
	if body.Headers[HeaderOriginalTopic] == "" || body.Headers[HeaderOriginalGroup] == "" {
		return false, nil
	}
	for _, c := range cps {
		if c.cs.Leased {
			return false, nil
		}
	}
	return true, nil
}

// restore publishes a dead letter again on its original topic, due now,
// for the group it came from only; the dead letter names both.
func (a *applier) restore(dead *fsmpb.StoredMessage, nowMs int64) error {
	headers := maps.Clone(dead.Headers)
	topic, group := headers[HeaderOriginalTopic], headers[HeaderOriginalGroup]
	for k := range headers {
		if strings.HasPrefix(k, "sundial-") {
			delete(headers, k)
		}
	}
	m := &fsmpb.StoredMessage{
		Topic: topic, Partition: dead.Partition, Payload: dead.Payload, Headers: headers,
		PublishedAtMs: nowMs, DueAtMs: nowMs, FairnessKey: dead.FairnessKey, Priority: dead.Priority,
		DedupWindowMs: dead.DedupWindowMs, GroupsPending: 1, Fair: dead.Headers[HeaderOriginalFair] == "1",
	}
	// One copy: it lives in the body, which putCopy writes.
	m.InlineGroup = group
	id := a.nextID()
	c, err := a.counter(topic, group)
	if err != nil {
		return err
	}
	c.Pending++
	cs := &fsmpb.CopyState{VisibleAtMs: nowMs, Priority: m.Priority, Partition: m.Partition, Topic: topic, Fair: m.Fair, FairnessKey: m.FairnessKey}
	return a.putCopy(&groupCopy{id: id, group: group, cs: cs, body: m})
}

// expire removes up to limit messages whose TTL ended by now, from the TTL
// index; copies under a running lease finish their delivery. It also drops
// the copies of the messages the dispatcher named because it found them due
// and expired: copies that were leased when their TTL ended, whose expiry
// entry is gone, once their lease ran out or was nacked.
func (a *applier) expire(e *fsmpb.Expire) (*fsmpb.Outcome, error) {
	lower, upper := keys.ExpiryRange(a.shard, e.NowMs)
	ks, err := a.scanKeys(lower, upper, int(e.Limit), nil)
	if err != nil {
		return nil, err
	}
	var n uint32
	for _, k := range ks {
		_, id, err := keys.ParseExpiry(k)
		if err != nil {
			return nil, err
		}
		if err := a.del(k); err != nil {
			return nil, err
		}
		if _, err := a.dropExpired(id, e.NowMs); err != nil {
			return nil, err
		}
		n++
	}
	for _, id := range e.MessageIds {
		if len(id) != keys.IDBytes {
			continue
		}
		var body fsmpb.StoredMessage
		found, err := a.get(keys.Message(a.shard, id), &body)
		if err != nil {
			return nil, err
		}
		// Rewritten since it was named (a REPLACE renews the TTL), or gone.
		if !found || body.ExpiresAtMs == 0 || body.ExpiresAtMs > e.NowMs {
			continue
		}
		dropped, err := a.dropExpired(id, e.NowMs)
		if err != nil {
			return nil, err
		}
		if dropped > 0 {
			n++
		}
	}
	return &fsmpb.Outcome{Count: n}, nil
}

// dropExpired drops, as EXPIRED, a message's copies that are not under a
// lease running at nowMs (never leased, nacked, or whose lease ran out),
// and answers how many.
func (a *applier) dropExpired(id []byte, nowMs int64) (int, error) {
	_, cps, err := a.copies(id)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cps {
		if c.cs.Leased && c.cs.VisibleAtMs > nowMs {
			continue
		}
		if err := a.dropCopy(c, nowMs, fsmpb.EndState_END_STATE_EXPIRED); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
