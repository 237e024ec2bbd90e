package dispatch

import (
	"sync"
	"sync/atomic"
	"time"
)

// changeSettleAfterError is how long a change whose proposal failed still
// counts as pending: a timed-out proposal may yet commit.
const changeSettleAfterError = 10 * time.Second

// fence owns the change fence. A change (cancel, reschedule, a keyed
// REPLACE or DEBOUNCE publish) committed between a round's pick and its
// lease would answer for a copy already pushed, so a round pushes before
// its lease commits only if no change was pending when it picked and none
// began before its lease was queued.
//
// Changes begin and end on gRPC goroutines, rounds mark and check on the
// loop; it holds only atomics, no lock.
type fence struct {
	begun   atomic.Uint64 // changes ever begun
	pending atomic.Int64  // changes begun and not yet settled
	// settleAfterError is changeSettleAfterError; a field for tests.
	settleAfterError time.Duration
}

func newFence() *fence { return &fence{settleAfterError: changeSettleAfterError} }

// begin counts a change about to be proposed; end is called once with the
// proposal's error when it returned (later calls do nothing). A failed
// change stays pending for settleAfterError.
func (f *fence) begin() (end func(err error)) {
	f.pending.Add(1)
	f.begun.Add(1)
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			if err != nil {
				time.AfterFunc(f.settleAfterError, func() { f.pending.Add(-1) })
				return
			}
			f.pending.Add(-1)
		})
	}
}

// fenceMark is what a round saw of the fence when it picked.
type fenceMark struct {
	begun uint64
	quiet bool // no change was pending
}

// mark is taken by a round before it picks.
func (f *fence) mark() fenceMark {
	begun := f.begun.Load()
	return fenceMark{begun: begun, quiet: f.pending.Load() == 0}
}

// clearSince answers whether no change was pending at m and none began
// since: only then may the round push ahead of its lease.
func (f *fence) clearSince(m fenceMark) bool {
	return m.quiet && f.begun.Load() == m.begun
}
