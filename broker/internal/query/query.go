// Package query answers the read-only questions the broker's API asks of
// one shard's applied state: a message and its copies by id or key,
// listings by due time or key prefix with paging, each group's counts, a
// due-time histogram, and whether a group is registered.
//
// It is the only reader of the key layout outside the state machine (keys
// owns the layout, fsm writes it): callers get domain values, never keys or
// stored records, and convert them to their own protos and errors.
//
// A Reader is a value over a *pebble.DB, one shard id and the caller's
// clock reading; it holds no state between calls, so any goroutine may use
// its own Reader at any time. Reads see Pebble's latest applied state; a
// caller that needs them linearizable (a new leader) passes its barrier
// first. Every scan is bounded (the Max*Examined constants), so one call
// costs at most that many index entries whatever the shard holds.
package query

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// Read budgets: how many index entries one call examines at most. A call
// that runs out answers what it found so far.
const (
	MaxListExamined  = 100_000
	MaxStatsExamined = 100_000
	MaxHistExamined  = 1_000_000
)

// Reader reads one shard's applied state at one clock reading.
type Reader struct {
	db    *pebble.DB
	shard uint64
	nowMs int64
}

// New returns a Reader of shard in db; nowMs decides which copies are
// ready or in flight.
func New(db *pebble.DB, shard uint64, nowMs int64) *Reader {
	return &Reader{db: db, shard: shard, nowMs: nowMs}
}

// get decodes the record at key into m; false if there is none.
func (r *Reader) get(key []byte, m proto.Message) (bool, error) {
	v, closer, err := r.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	return true, proto.Unmarshal(v, m)
}

// has reports whether key exists.
func (r *Reader) has(key []byte) (bool, error) {
	_, closer, err := r.db.Get(key)
	switch {
	case err == nil:
		return true, closer.Close()
	case errors.Is(err, pebble.ErrNotFound):
		return false, nil
	}
	return false, err
}

// each calls fn for the entries in [lower, upper) until it returns false.
func (r *Reader) each(lower, upper []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(err, it.Close())
		}
		more, err := fn(it.Key(), v)
		if err != nil || !more {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// HasGroup reports whether group of topic is registered on the shard.
func (r *Reader) HasGroup(topic, group string) (bool, error) {
	return r.has(keys.Group(r.shard, topic, group))
}

// Groups answers the groups of topic registered on the shard, in name
// order.
func (r *Reader) Groups(topic string) ([]string, error) {
	prefix := keys.GroupPrefix(r.shard, topic)
	var groups []string
	err := r.each(prefix, keys.PrefixEnd(prefix), func(k, _ []byte) (bool, error) {
		groups = append(groups, keys.GroupFromKey(r.shard, topic, k))
		return true, nil
	})
	return groups, err
}

// CopyTopic answers the topic of message id's copy for group; false if
// the copy is gone.
func (r *Reader) CopyTopic(id []byte, group string) (string, bool, error) {
	_, cs, err := fsm.ReadCopy(r.db, r.shard, id, group)
	if err != nil || cs == nil {
		return "", false, err
	}
	return cs.Topic, true, nil
}
