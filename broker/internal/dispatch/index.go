package dispatch

import (
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
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
	// horizons are where each FAIR queue's catch-up stopped in its due
	// index (see catchUp); they have the floors' rules and their own lock.
	horizons *floors
	// visited counts the index entries the fair reads stepped on (in the
	// due index, for a catch-up, and in the fair index), and scans the
	// iterators scan opened, so tests can assert what a round costs.
	visited int
	scans   int
	// rebuilt is told of every rebuild of a FAIR queue's active keys from
	// the fair index (a metric).
	rebuilt func()
}

type dueItem struct{ item *fsmpb.LeaseItem }

// dueItem turns the index entry e of q under it into a lease candidate;
// busy when its lease is already being proposed (leasing then notes that
// a round passed it over).
func (x *dueIndex) dueItem(it *pebble.Iterator, q keys.Queue, e keys.DueEntry, leasing leasingSet) (dueItem, bool, error) {
	if leasing.skip(string(e.ID) + q.Group) {
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
	return dueItem{item: &fsmpb.LeaseItem{
		Ref:         &fsmpb.MessageRef{MessageId: slices.Clone(e.ID), Group: q.Group, Attempt: attempt},
		VisibleAtMs: e.VisibleAtMs,
	}}, false, nil
}

// scan returns up to limit copies of q visible at or before nowMs that are
// not in leasing, and when to look again: now if it stopped at
// the limit, else the visible_at of the first later copy (zero if none).
// It starts at q's floor and leaves the floor at the first entry it saw;
// a floor later than nowMs answers without reading.
// Entries between the floor and the first entry it saw were deleted (their
// leases committed) or are being leased; a lease that fails or conflicts
// leaves its copy at its key, which is at or after the floor.
func (x *dueIndex) scan(q keys.Queue, nowMs int64, limit int, leasing leasingSet) (out []dueItem, wakeAt time.Time, err error) {
	prefix := keys.QueuePrefix(x.shard, q)
	lower := prefix
	if f, ok := x.floors.begin(q); ok {
		if f.ms > nowMs {
			// Nothing of q is due before its floor: no need to read
			// (a round for another queue's due instant, or for credit).
			x.floors.end(q, f, true)
			return nil, time.UnixMilli(f.ms), nil
		}
		lower = f.key
		if lower == nil {
			lower = keys.DueFrom(x.shard, q, f.ms)
		}
	}
	x.scans++
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
	valid := it.First()
	later := false // the iterator stopped at the first entry not yet due
	for ; valid && len(out) < limit; valid = it.Next() {
		if string(it.Key()) >= string(until) {
			later = true
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
	// Without a limit the loop ends at the first entry due later (or at
	// the end of the queue): no second seek is needed to find it.
	if len(out) == limit {
		wakeAt = time.UnixMilli(nowMs)
	} else if later {
		if e, err := keys.ParseDue(x.shard, q, it.Key()); err == nil {
			wakeAt = time.UnixMilli(e.VisibleAtMs)
			note(e.VisibleAtMs, it.Key())
		}
	}
	return out, wakeAt, it.Error()
}

// maxFairCatchUp bounds the due-index entries a round of a FAIR queue
// reads to learn which keys became due since the last: past it, rebuilding
// the active keys from the fair index (one seek per key) costs less.
const maxFairCatchUp = 4096

// pickFair picks up to limit due copies of the FAIR queue q that are not in
// leasing, fairly among its keys by t, and returns when to look again: the
// visible_at of the first copy due later (zero if none). It reads only what
// the pick takes from each key it chooses (from the key's cursor), plus the
// copies that became due since the last round; keys with nothing due cost
// it nothing.
func (x *dueIndex) pickFair(q keys.Queue, t *fairTree, nowMs int64, limit int, weights map[string]int32, leasing leasingSet) ([]dueItem, time.Time, error) {
	wakeAt, short, err := x.catchUp(q, t, nowMs)
	if err != nil {
		return nil, time.Time{}, err
	}
	prefix := keys.FairPrefix(x.shard, q)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer it.Close()
	var touched []*fairNode
	var readErr error
	out := t.round(limit, weights, func(n *fairNode) (dueItem, bool) {
		l := n.leaf
		if !l.touched {
			l.touched, l.pos, l.seen = true, l.cursor, nil
			if l.pos == nil {
				l.pos = keys.FairKeyPrefix(x.shard, q, l.fairnessKey)
			}
			l.until = keys.FairUntil(x.shard, q, l.fairnessKey, nowMs)
			touched = append(touched, n)
		}
		if readErr != nil {
			return dueItem{}, false
		}
		item, ok, err := x.readFair(it, q, l, leasing)
		if err != nil {
			readErr = err
		}
		return item, ok
	})
	// A key whose read saw nothing due, not even a copy being leased, is
	// idle: it leaves the tree until a copy of it becomes due.
	idle := 0
	for _, n := range touched {
		l := n.leaf
		l.touched = false
		if readErr == nil && l.seen == nil {
			t.deactivate(n)
			idle++
		} else if l.seen != nil {
			l.cursor = l.seen
		}
	}
	if readErr != nil {
		return nil, time.Time{}, readErr
	}
	if short && idle > 0 {
		// Keys left out for want of room have room now.
		wakeAt = time.UnixMilli(nowMs)
	}
	return out, wakeAt, it.Error()
}

// readFair returns the next due copy of l's key from l.pos up to l.until
// that is not in leasing, noting the first entry it sees; false when the
// key has none.
func (x *dueIndex) readFair(it *pebble.Iterator, q keys.Queue, l *fairLeaf, leasing leasingSet) (dueItem, bool, error) {
	for valid := it.SeekGE(l.pos); valid && string(it.Key()) < string(l.until); valid = it.Next() {
		x.visited++
		_, e, err := keys.ParseFair(x.shard, q, it.Key())
		if err != nil {
			return dueItem{}, false, err
		}
		if l.seen == nil {
			l.seen = slices.Clone(it.Key())
		}
		item, busy, err := x.dueItem(it, q, e, leasing)
		if err != nil {
			return dueItem{}, false, err
		}
		if !busy {
			l.buf = append(append(l.buf[:0], it.Key()...), 0) // just past it
			l.pos = l.buf
			return item, true, nil
		}
	}
	l.pos = l.until
	return dueItem{}, false, it.Error()
}

// catchUp makes active in t the keys of q's copies that became due since
// the last round (at or before nowMs), lowering their cursors, and returns
// the visible_at of the first copy due later (zero if none); short when t
// had no room for every key that is due.
//
// The queue's horizon (in horizons, kept like a scan floor) is where the
// last catch-up stopped in the due index: every copy before it had its key
// made active. Insertions before it lower it. A queue without a horizon
// (a new leader, a reset state, a failed read) or too much to catch up on
// is rebuilt from the fair index instead. With t full, the catch-up stops
// at the first copy whose key it cannot add, and the next one starts there;
// a rebuild that cannot add a key leaves the queue without a horizon.
func (x *dueIndex) catchUp(q keys.Queue, t *fairTree, nowMs int64) (wakeAt time.Time, short bool, err error) {
	h, ok := x.horizons.begin(q)
	horizon, complete := nowMs+1, true
	defer func() { x.horizons.end(q, floor{ms: horizon}, err == nil && complete) }()
	prefix := keys.QueuePrefix(x.shard, q)
	until := keys.DueUntil(x.shard, q, nowMs)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return time.Time{}, false, err
	}
	defer it.Close()
	if ok {
		n := 0
		valid := it.SeekGE(keys.DueFrom(x.shard, q, h.ms))
		for ; valid && string(it.Key()) < string(until) && n < maxFairCatchUp; valid = it.Next() {
			x.visited++
			n++
			e, added, err := x.activate(q, t, it.Key())
			if err != nil {
				return time.Time{}, false, err
			}
			if !added {
				horizon = e.VisibleAtMs
				break
			}
		}
		ok = horizon <= nowMs || !valid || string(it.Key()) >= string(until)
	}
	if !ok {
		if complete, err = x.rebuild(q, t, nowMs); err != nil {
			return time.Time{}, false, err
		}
	}
	if it.SeekGE(until) {
		if e, err := keys.ParseDue(x.shard, q, it.Key()); err == nil {
			wakeAt = time.UnixMilli(e.VisibleAtMs)
		}
	}
	return wakeAt, horizon <= nowMs || !complete, it.Error()
}

// activate makes the key of the copy at due-index key k active in t, its
// cursor at or below the copy's fair-index entry; added is false when t is
// full without the key.
func (x *dueIndex) activate(q keys.Queue, t *fairTree, k []byte) (e keys.DueEntry, added bool, err error) {
	e, err = keys.ParseDue(x.shard, q, k)
	if err != nil {
		return e, false, err
	}
	_, cs, err := fsm.ReadCopy(x.db, x.shard, e.ID, q.Group)
	if err != nil || cs == nil || !cs.Fair { // nil: gone since the iterator's snapshot
		return e, true, err
	}
	return e, activateAt(t, cs.FairnessKey, keys.Fair(x.shard, q, cs.FairnessKey, e.VisibleAtMs, e.Priority, e.ID)), nil
}

// activateAt makes fk active in t with its cursor at or below entry; false
// when t is full without fk.
func activateAt(t *fairTree, fk string, entry []byte) bool {
	n := t.activate(fk)
	if n == nil {
		return false
	}
	if l := n.leaf; l.cursor == nil || string(entry) < string(l.cursor) {
		l.cursor = slices.Clone(entry)
	}
	return true
}

// rebuild makes active in t every key of q with a copy due at or before
// nowMs, reading the first entry of each key of the fair index, and
// answers whether t had room for them all.
func (x *dueIndex) rebuild(q keys.Queue, t *fairTree, nowMs int64) (bool, error) {
	x.rebuilt()
	prefix := keys.FairPrefix(x.shard, q)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		x.visited++
		fk, e, err := keys.ParseFair(x.shard, q, it.Key())
		if err != nil {
			return false, err
		}
		if e.VisibleAtMs <= nowMs && !activateAt(t, fk, it.Key()) {
			return false, it.Error()
		}
		valid = it.SeekGE(keys.PrefixEnd(keys.FairKeyPrefix(x.shard, q, fk)))
	}
	return true, it.Error()
}

// bodyReader reads the bodies of one round's picks through one iterator.
// A queue's picks come in due-index order, which for copies due at one
// instant (a burst) is message id order, the bodies' key order: each read
// then steps forward from the one before, where a Get per body searched
// every level of the store again (about twice the CPU per read).
type bodyReader struct {
	shard uint64
	it    *pebble.Iterator
}

// bodies opens a bodyReader on the store as it is now; close it.
func (x *dueIndex) bodies() (*bodyReader, error) {
	prefix := keys.MessagePrefix(x.shard)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	return &bodyReader{shard: x.shard, it: it}, nil
}

func (r *bodyReader) close() error { return r.it.Close() }

// delivery reads the body of p's message and returns its delivery and TTL
// expiry; pebble.ErrNotFound if the message is gone. It stamps p's lease
// item with the body's content version: the payload and the version come
// from one read, so the lease commits exactly when the payload pushed is
// still the message's current contents.
func (r *bodyReader) delivery(p pick) (*sundialv1.Delivery, int64, error) {
	id, err := receipt.MessageIDFromBytes(p.item.Ref.MessageId)
	if err != nil {
		return nil, 0, err
	}
	// The comparer's prefix of a key is the whole key: this finds the body
	// or nothing, and uses the tables' bloom filters as a Get does.
	if !r.it.SeekPrefixGE(keys.Message(r.shard, id[:])) {
		if err := r.it.Error(); err != nil {
			return nil, 0, err
		}
		return nil, 0, pebble.ErrNotFound
	}
	v, err := r.it.ValueAndErr()
	if err != nil {
		return nil, 0, err
	}
	var m fsmpb.StoredMessage
	if err := proto.Unmarshal(v, &m); err != nil {
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

// forgettable answers whether the local state holds a record a sweep by
// beforeMs and nowMs would forget: a dedup record applied before beforeMs
// or a forget-index entry at or before nowMs (the ranges the Sweep command
// deletes from). A record committed but not applied here yet is left to
// the next sweep.
func (x *dueIndex) forgettable(beforeMs, nowMs int64) bool {
	return x.holds(keys.DedupAtRange(x.shard, beforeMs)) || x.holds(keys.ForgetUntil(x.shard, nowMs))
}

// holds answers whether the store has a key in [lower, upper). A failed
// read answers true: the sweep command then decides.
func (x *dueIndex) holds(lower, upper []byte) bool {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return true
	}
	found := it.First()
	if err := it.Close(); err != nil {
		return true
	}
	return found
}
