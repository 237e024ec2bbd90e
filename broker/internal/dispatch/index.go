package dispatch

import (
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/keys"
	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// dueIndex reads what a round needs of the shard's store: the due index
// of a queue from its scan floor, the fair index, message bodies and the
// earliest TTL expiry. It writes nothing but the scan floors.
//
// Only the loop uses it; reads need no lock (Pebble iterators see a
// consistent snapshot), the floors have their own.
type dueIndex struct {
	shard  uint64
	db     *pebble.DB
	floors *floors
}

type dueItem struct{ item *raftv1.LeaseItem }

// dueItem turns the index entry e of q under it into a lease candidate;
// busy when its lease is already being proposed. leasing holds the copies being leased.
func (x *dueIndex) dueItem(it *pebble.Iterator, q keys.Queue, e keys.DueEntry, leasing map[string]struct{}) (dueItem, bool, error) {
	if _, busy := leasing[string(e.ID)+q.Group]; busy {
		return dueItem{}, true, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return dueItem{}, false, err
	}
	attempt, _, err := keys.ParseDueValue(v)
	if err != nil {
		return dueItem{}, false, err
	}
	return dueItem{item: &raftv1.LeaseItem{
		Ref:         &raftv1.MessageRef{MessageId: slices.Clone(e.ID), Group: q.Group, Attempt: attempt},
		VisibleAtMs: e.VisibleAtMs,
	}}, false, nil
}

// scan returns up to limit copies of q visible at or before nowMs that are
// not in leasing, and when to look again: now if it stopped at
// the limit, else the visible_at of the first later copy (zero if none).
// It starts at q's floor and leaves the floor at the first entry it saw.
// Entries between the floor and the first entry it saw were deleted (their
// leases committed) or are being leased; a lease that fails or conflicts
// leaves its copy at its key, which is at or after the floor.
func (x *dueIndex) scan(q keys.Queue, nowMs int64, limit int, leasing map[string]struct{}) (out []dueItem, wakeAt time.Time, err error) {
	prefix := keys.QueuePrefix(x.shard, q)
	lower := prefix
	if f, ok := x.floors.begin(q); ok {
		lower = f.key
		if lower == nil {
			lower = keys.DueFrom(x.shard, q, f.ms)
		}
	}
	first := floor{ms: nowMs} // for an empty queue: every later insertion lowers the floor
	seen := false
	defer func() { x.floors.end(q, first, err == nil) }()
	note := func(visibleAtMs int64, key []byte) {
		if !seen {
			first, seen = floor{ms: visibleAtMs, key: slices.Clone(key)}, true
		}
	}
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer it.Close()
	until := keys.DueUntil(x.shard, q, nowMs)
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		if string(it.Key()) >= string(until) {
			break
		}
		e, err := keys.ParseDue(x.shard, q, it.Key())
		if err != nil {
			return nil, time.Time{}, err
		}
		note(e.VisibleAtMs, it.Key())
		item, busy, err := x.dueItem(it, q, e, leasing)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !busy {
			out = append(out, item)
		}
	}
	if len(out) == limit {
		wakeAt = time.UnixMilli(nowMs)
	} else if it.SeekGE(until) {
		if e, err := keys.ParseDue(x.shard, q, it.Key()); err == nil {
			wakeAt = time.UnixMilli(e.VisibleAtMs)
			note(e.VisibleAtMs, it.Key())
		}
	}
	return out, wakeAt, it.Error()
}

// scanFair returns, by fairness key, up to limit due copies of each key of
// a FAIR queue that are not in leasing, and the visible_at of the first
// later copy (zero if none); the fair scheduler chooses among them.
func (x *dueIndex) scanFair(q keys.Queue, nowMs int64, limit int, leasing map[string]struct{}) (map[string][]dueItem, time.Time, error) {
	prefix := keys.FairPrefix(x.shard, q)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer it.Close()
	byKey := map[string][]dueItem{}
	var wakeAt time.Time
	for valid := it.First(); valid; {
		fk, _, err := keys.ParseFair(x.shard, q, it.Key())
		if err != nil {
			return nil, time.Time{}, err
		}
		// Take up to limit due entries of this key...
		for ; valid; valid = it.Next() {
			cur, e, err := keys.ParseFair(x.shard, q, it.Key())
			if err != nil {
				return nil, time.Time{}, err
			}
			if cur != fk || len(byKey[fk]) >= limit {
				break
			}
			if e.VisibleAtMs > nowMs {
				if at := time.UnixMilli(e.VisibleAtMs); wakeAt.IsZero() || at.Before(wakeAt) {
					wakeAt = at
				}
				break
			}
			item, busy, err := x.dueItem(it, q, e, leasing)
			if err != nil {
				return nil, time.Time{}, err
			}
			if !busy {
				byKey[fk] = append(byKey[fk], item)
			}
		}
		// ...then jump past the rest of it.
		if valid {
			if cur, _, err := keys.ParseFair(x.shard, q, it.Key()); err == nil && cur == fk {
				valid = it.SeekGE(keys.PrefixEnd(keys.FairKeyPrefix(x.shard, q, fk)))
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, time.Time{}, err
	}
	return byKey, wakeAt, nil
}

// delivery reads the body of p's message and returns its delivery and TTL
// expiry. It stamps p's lease item with the body's content version: the
// payload and the version come from one read, so the lease commits exactly
// when the payload pushed is still the message's current contents.
func (x *dueIndex) delivery(p pick) (*sundialv1.Delivery, int64, error) {
	id, err := receipt.MessageIDFromBytes(p.item.Ref.MessageId)
	if err != nil {
		return nil, 0, err
	}
	v, closer, err := x.db.Get(keys.Message(x.shard, id[:]))
	if err != nil {
		return nil, 0, err
	}
	var m raftv1.StoredMessage
	err = proto.Unmarshal(v, &m)
	closer.Close()
	if err != nil {
		return nil, 0, err
	}
	p.item.Version = m.Version
	attempt := p.item.Ref.Attempt + 1
	return &sundialv1.Delivery{
		MessageId:           id.String(),
		Receipt:             receipt.Receipt{Message: id, Group: p.q.Group, Attempt: attempt}.String(),
		Topic:               m.Topic,
		Payload:             m.Payload,
		Headers:             m.Headers,
		Attempt:             int32(attempt),
		PublishedAtUnixMs:   m.PublishedAtMs,
		DueAtUnixMs:         m.DueAtMs,
		FairnessKey:         m.FairnessKey,
		Key:                 m.Key,
		Group:               p.q.Group,
		LeaseDeadlineUnixMs: p.item.DeadlineMs,
	}, m.ExpiresAtMs, nil
}

// firstExpiry reads the earliest TTL expiry on the shard, 0 if none.
func (x *dueIndex) firstExpiry() int64 {
	prefix := keys.ExpiryPrefix(x.shard)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return 0
	}
	defer it.Close()
	if !it.First() {
		return 0
	}
	at, _, err := keys.ParseExpiry(it.Key())
	if err != nil {
		return 0
	}
	return max(at, 1)
}
