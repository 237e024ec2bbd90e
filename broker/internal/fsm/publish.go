package fsm

import (
	"bytes"
	"errors"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/proto/receipt"
)

// publish stores p's messages. A claim (claim_id) of a client request id
// is checked first: recorded with another digest, the whole publish is
// RequestIdReused; not recorded, it is now. A request id applied before
// answers the first outcome and writes nothing; if the two requests differ (their
// digests, or their message counts), the id was reused for other messages
// and the outcome says so (RequestIdReused) instead of handing out another
// request's ids. A record or request without a digest matches any of the
// same count, so the outcome always has one result per message. A change's
// record (no published results) never matches a publish. A publish with a
// keyed message of a fenced partition (fence.go) writes nothing and says
// which (Fenced).
func (a *applier) publish(p *fsmpb.Publish) (*fsmpb.Outcome, error) {
	if p.ClaimId != "" {
		var rec fsmpb.DedupRecord
		found, err := a.get(keys.Dedup(a.shard, p.ClaimId), &rec)
		if err != nil {
			return nil, err
		}
		switch {
		case found && !bytes.Equal(rec.Digest, p.ClaimDigest):
			return &fsmpb.Outcome{RequestIdReused: true}, nil
		case !found:
			if err := a.remember(p.ClaimId, p.NowMs, p.ClaimDigest, &fsmpb.Outcome{}); err != nil {
				return nil, err
			}
		}
	}
	if p.RequestId != "" {
		var rec fsmpb.DedupRecord
		found, err := a.get(keys.Dedup(a.shard, p.RequestId), &rec)
		if err != nil {
			return nil, err
		}
		if found {
			if len(rec.GetOutcome().GetPublished()) != len(p.Messages) ||
				len(rec.Digest) > 0 && len(p.Digest) > 0 && !bytes.Equal(rec.Digest, p.Digest) {
				return &fsmpb.Outcome{RequestIdReused: true}, nil
			}
			return rec.Outcome, nil
		}
	}
	if f, err := a.fenced(p.Messages); err != nil || f != nil {
		return &fsmpb.Outcome{Fenced: f}, err
	}
	out := &fsmpb.Outcome{Published: make([]*fsmpb.PublishOutcome, 0, len(p.Messages))}
	for _, m := range p.Messages {
		po, err := a.publishOne(p.NowMs, m)
		if err != nil {
			return nil, err
		}
		out.Published = append(out.Published, po)
	}
	if p.RequestId != "" {
		if err := a.remember(p.RequestId, p.NowMs, p.Digest, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// remember writes the dedup record of a publish or change request and its
// entry in the age index, which a sweep past the dedup window forgets.
func (a *applier) remember(requestID string, nowMs int64, digest []byte, out *fsmpb.Outcome) error {
	if err := a.put(keys.Dedup(a.shard, requestID), &fsmpb.DedupRecord{AppliedAtMs: nowMs, Outcome: out, Digest: digest}); err != nil {
		return err
	}
	return a.set(keys.DedupAt(a.shard, nowMs, requestID), nil)
}

// publishOne stores m, or meets the pending message of its key as its
// on_conflict says.
func (a *applier) publishOne(nowMs int64, m *fsmpb.StoredMessage) (*fsmpb.PublishOutcome, error) {
	if m.Key == "" {
		return a.store(m)
	}
	var rec fsmpb.KeyRecord
	found, err := a.get(keys.Key(a.shard, m.Topic, m.Key), &rec)
	if err != nil {
		return nil, err
	}
	if found && rec.End != fsmpb.EndState_END_STATE_PENDING && rec.ForgetAtMs <= nowMs {
		found = false // remembered no longer
	}
	if !found {
		return a.store(m)
	}
	ignored := &fsmpb.PublishOutcome{MessageId: rec.MessageId, KeyOutcome: fsmpb.KeyOutcome_KEY_OUTCOME_IGNORED}
	rejected := &fsmpb.PublishOutcome{MessageId: rec.MessageId, KeyOutcome: fsmpb.KeyOutcome_KEY_OUTCOME_REJECTED}
	if rec.End != fsmpb.EndState_END_STATE_PENDING {
		switch m.OnConflict {
		case fsmpb.KeyConflict_KEY_CONFLICT_IGNORE:
			return ignored, nil
		case fsmpb.KeyConflict_KEY_CONFLICT_REJECT:
			return rejected, nil
		}
		return a.store(m) // replace or debounce after the end: a new message
	}
	var body fsmpb.StoredMessage
	if _, err := a.get(keys.Message(a.shard, rec.MessageId), &body); err != nil {
		return nil, err
	}
	switch m.OnConflict {
	case fsmpb.KeyConflict_KEY_CONFLICT_IGNORE:
		ignored.DueAtMs = body.DueAtMs
		return ignored, nil
	case fsmpb.KeyConflict_KEY_CONFLICT_REJECT:
		rejected.DueAtMs = body.DueAtMs
		return rejected, nil
	}
	cps, err := a.copiesOf(rec.MessageId, &body)
	if err != nil {
		return nil, err
	}
	for _, c := range cps {
		if c.cs.Leased || c.cs.Attempt > 0 {
			// Delivery began: that message runs its course and the key
			// moves on to a new one.
			return a.store(m)
		}
	}
	due := m.DueAtMs
	outcome := fsmpb.KeyOutcome_KEY_OUTCOME_REPLACED
	if m.OnConflict == fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE {
		outcome = fsmpb.KeyOutcome_KEY_OUTCOME_DEBOUNCED
		if rec.DueCapMs > 0 {
			due = min(due, rec.DueCapMs)
		}
	}
	if err := a.rewrite(rec.MessageId, &body, m, due, cps); err != nil {
		return nil, err
	}
	return &fsmpb.PublishOutcome{MessageId: rec.MessageId, DueAtMs: due, KeyOutcome: outcome}, nil
}

// rewrite gives a pending message new contents and a new due time, moving
// every group's copy (cps, which share body). It raises the content version
// on the body and every copy, so a lease of what a round read before (whose
// attempt and visible_at may still match, e.g. a DEBOUNCE at its cap) is
// refused as stale.
func (a *applier) rewrite(id []byte, body, m *fsmpb.StoredMessage, due int64, cps []*groupCopy) error {
	if body.ExpiresAtMs != 0 {
		if err := a.del(keys.Expiry(a.shard, body.ExpiresAtMs, id)); err != nil {
			return err
		}
	}
	body.Payload, body.Headers, body.FairnessKey = m.Payload, m.Headers, m.FairnessKey
	body.ExpiresAtMs = 0
	if m.ExpiresAtMs != 0 {
		body.ExpiresAtMs = due + (m.ExpiresAtMs - m.DueAtMs)
		if err := a.indexExpiry(id, body.ExpiresAtMs); err != nil {
			return err
		}
	}
	body.DueAtMs, body.Priority = due, m.Priority
	body.Version++
	for _, c := range cps {
		if err := a.unindex(c); err != nil {
			return err
		}
		// The fair-index entry moves with the fairness key: unindex
		// removed it under the old one, putCopy writes it under the new.
		c.cs.Priority, c.cs.VisibleAtMs, c.cs.Version = m.Priority, due, body.Version
		c.cs.FairnessKey = m.FairnessKey
		c.head = nil                         // the body changed: encode it whole
		if err := a.putCopy(c); err != nil { // writes an inline copy's body
			return err
		}
	}
	if body.InlineGroup != "" {
		return nil
	}
	return a.put(keys.Message(a.shard, id), body)
}

// store writes a new message with a copy for every group of its topic on
// this shard, and makes it its key's message. A message of a one-group
// topic keeps its copy inline: body and due entry are all it writes.
func (a *applier) store(m *fsmpb.StoredMessage) (*fsmpb.PublishOutcome, error) {
	gs, err := a.groups(m.Topic)
	if err != nil {
		return nil, err
	}
	id := a.nextID()
	if m.Key != "" {
		nr := &fsmpb.KeyRecord{MessageId: id}
		if m.OnConflict == fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE && m.MaxWaitMs > 0 {
			nr.DueCapMs = m.PublishedAtMs + m.MaxWaitMs
			m.DueAtMs = min(m.DueAtMs, nr.DueCapMs)
		}
		if err := a.put(keys.Key(a.shard, m.Topic, m.Key), nr); err != nil {
			return nil, err
		}
	}
	m.OnConflict, m.MaxWaitMs = 0, 0
	m.Version = 0 // a new message's first contents; copies start at it too
	m.GroupsPending = uint32(len(gs))
	clearInline(m)
	if len(gs) == 1 {
		m.InlineGroup = gs[0] // putCopy writes the body
	} else if err := a.put(keys.Message(a.shard, id), m); err != nil {
		return nil, err
	}
	if m.ExpiresAtMs != 0 {
		if err := a.indexExpiry(id, m.ExpiresAtMs); err != nil {
			return nil, err
		}
	}
	for _, g := range gs {
		cs := &fsmpb.CopyState{VisibleAtMs: m.DueAtMs, Priority: m.Priority, Partition: m.Partition, Topic: m.Topic, Fair: m.Fair, FairnessKey: m.FairnessKey}
		if err := a.putCopy(&groupCopy{id: id, group: g, cs: cs, body: m}); err != nil {
			return nil, err
		}
		c, err := a.counter(m.Topic, g)
		if err != nil {
			return nil, err
		}
		c.Pending++
	}
	return &fsmpb.PublishOutcome{MessageId: id, DueAtMs: m.DueAtMs, KeyOutcome: fsmpb.KeyOutcome_KEY_OUTCOME_CREATED}, nil
}

// nextID is the id of the next message this entry creates.
func (a *applier) nextID() []byte {
	id := receipt.NewMessageID(a.shard, a.index, a.pos)
	a.pos++
	return id[:]
}

func (a *applier) indexExpiry(id []byte, atMs int64) error {
	if a.expiryLow == 0 || atMs < a.expiryLow {
		a.expiryLow = atMs
	}
	return a.set(keys.Expiry(a.shard, atMs, id), nil)
}

// groups lists the groups of topic on this shard, registering the default
// group on first use.
func (a *applier) groups(topic string) ([]string, error) {
	if gs, ok := a.groupsOf[topic]; ok {
		return gs, nil
	}
	prefix := keys.GroupPrefix(a.shard, topic)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var gs []string
	for valid := it.First(); valid; valid = it.Next() {
		gs = append(gs, keys.GroupFromKey(a.shard, topic, it.Key()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, err
	}
	if len(gs) == 0 {
		gs = []string{DefaultGroup}
		if err := a.set(keys.Group(a.shard, topic, DefaultGroup), nil); err != nil {
			return nil, err
		}
	}
	a.groupsOf[topic] = gs
	return gs, nil
}
