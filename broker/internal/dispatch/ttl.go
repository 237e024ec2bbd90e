package dispatch

import "sync/atomic"

// ttlTimer owns when the next TTL expiry command is due: the earliest
// expiry on the shard, lowered by the expiries the state machine reports,
// read again from the store when the state was replaced or a command ran,
// and brought forward to now when a round named copies it found expired
// (copies leased when their TTL ended, which the TTL index no longer
// holds).
//
// The state machine's apply goroutine calls lower; everything else runs on
// the loop. lower only touches atomics; the loop's fields need no lock.
type ttlTimer struct {
	// first reads the earliest expiry in the store, 0 if none.
	first func() int64
	// next is the earliest expiry known (0: none, -1: not read yet).
	next int64
	// named are the messages the next command drops whatever their TTL
	// index says.
	named [][]byte
	low   atomic.Int64 // earliest expiry reported since the loop looked (0: none)
	reset atomic.Bool  // the state was replaced: read the expiry again
}

func newTTLTimer(first func() int64) *ttlTimer { return &ttlTimer{first: first, next: -1} }

// lower is told of an insertion expiring at expiryLow (0: none) or, with
// reset, that the state was replaced.
func (t *ttlTimer) lower(expiryLow int64, reset bool) {
	for expiryLow > 0 {
		cur := t.low.Load()
		if (cur != 0 && cur <= expiryLow) || t.low.CompareAndSwap(cur, expiryLow) {
			break
		}
	}
	if reset {
		t.reset.Store(true)
	}
}

// name has the next command drop message id, found expired by a round.
func (t *ttlTimer) name(id []byte) { t.named = append(t.named, id) }

// due answers at nowMs whether an expiry command should run now and the
// messages it names (handed over: a failed command forgets them, and the
// next round that finds them names them again); if none should run, at is
// when to look again (0: no expiry known).
func (t *ttlTimer) due(nowMs int64) (named [][]byte, run bool, at int64) {
	if t.reset.Swap(false) {
		t.next = -1
	}
	if low := t.low.Swap(0); low != 0 && t.next >= 0 && (t.next == 0 || low < t.next) {
		t.next = low
	}
	named, t.named = t.named, nil
	if len(named) > 0 {
		t.next = nowMs
	}
	if t.next < 0 {
		t.next = t.first()
	}
	if t.next == 0 || t.next > nowMs {
		return nil, false, t.next
	}
	return named, true, 0
}

// ran is told that an expiry command committed; it reads the earliest
// expiry again and answers it (0: none).
func (t *ttlTimer) ran() int64 {
	t.next = t.first()
	return t.next
}
