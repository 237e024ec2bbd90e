package dispatch

import (
	"math"
	"sync"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// floor is where a queue's first entry may be: at key when key is set,
// else anywhere from the instant ms on.
type floor struct {
	ms  int64
	key []byte
}

// floors owns the scan floors: for each queue, the position below which it
// has no due entries, so a scan seeks there instead of walking the
// tombstones of everything delivered before (in a burst, of every copy
// leased at the same instant). A queue without a floor is scanned from its
// start.
//
// Every insertion the state machine reports lowers the floor of its queue
// (lower, from the apply goroutine). A scan (begin, then end, from the
// loop) raises it to the first entry it saw; insertions reported while the
// scan runs, which its iterator may not see, are watched and keep the
// floor at or below them.
//
// The dispatcher keeps a second instance, under the same rules, for the
// horizons of FAIR queues: where each one's catch-up stopped in its due
// index (see dueIndex.catchUp).
//
// mu guards everything; it is taken after the dispatcher's mu when both
// are held (a scan runs under the dispatcher's mu).
type floors struct {
	mu sync.Mutex
	m  map[keys.Queue]floor
	// The queue being scanned and the lowest insertion reported for it
	// since its scan began; math.MinInt64 when the state was reset
	// meanwhile.
	scanning    keys.Queue
	scanningOn  bool
	scanningLow int64
}

func newFloors() *floors { return &floors{m: map[keys.Queue]floor{}} }

// lower is told of insertions into queues (lows: the earliest visible_at
// per queue) or, with reset, that the whole state was replaced, which drops
// every floor.
func (f *floors) lower(lows map[keys.Queue]int64, reset bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reset {
		clear(f.m)
		f.scanningLow = math.MinInt64
	}
	for q, low := range lows {
		if cur, ok := f.m[q]; ok && low <= cur.ms {
			// An insertion at the floor's own instant may sort before
			// its key: keep only the instant.
			f.m[q] = floor{ms: low}
		}
		if f.scanningOn && q == f.scanning {
			f.scanningLow = min(f.scanningLow, low)
		}
	}
}

// begin returns where a scan of q may start (false: from q's start) and
// watches insertions into q until end.
func (f *floors) begin(q keys.Queue) (floor, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scanning, f.scanningOn, f.scanningLow = q, true, math.MaxInt64
	cur, ok := f.m[q]
	return cur, ok
}

// end sets q's floor to first, the first entry the scan saw (or the
// instant it scanned up to, for an empty queue), or lower if insertions
// were reported meanwhile. A failed scan (ok false), or a reset during it,
// leaves q without a floor.
func (f *floors) end(q keys.Queue, first floor, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scanningOn = false
	if !ok || f.scanningLow == math.MinInt64 {
		delete(f.m, q)
		return
	}
	if f.scanningLow <= first.ms {
		first = floor{ms: f.scanningLow}
	}
	f.m[q] = first
}
