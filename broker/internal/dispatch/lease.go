package dispatch

import (
	"sync"
	"time"
)

// leaderLease owns the leader lease: the time until which no other replica
// can have been elected, the issue time of the last confirmed read plus
// the timeout. Counting from the issue, not the answer, keeps it safe
// however long the read took: the quorum that answered heard from this
// leader after it was issued. A zero timeout never holds.
//
// The barrier and the renewer confirm it, rounds (on the loop) check it,
// EndLease (a gRPC or host goroutine) ends it; mu is a leaf lock.
type leaderLease struct {
	timeout time.Duration
	renew   chan struct{} // cap 1: a round asks the renewer for a fresh lease
	mu      sync.Mutex    // guards until and ended
	until   time.Time
	ended   bool // given up for good (a leadership transfer began)
}

func newLeaderLease(timeout time.Duration) *leaderLease {
	return &leaderLease{timeout: timeout, renew: make(chan struct{}, 1)}
}

// confirmed extends the lease by a read issued at issued that passed.
func (l *leaderLease) confirmed(issued time.Time) {
	if l.timeout <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if end := issued.Add(l.timeout); end.After(l.until) && !l.ended {
		l.until = end
	}
}

// end gives the lease up for the rest of this leadership.
func (l *leaderLease) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended, l.until = true, time.Time{}
}

// remaining is how long the lease still holds at now (≤ 0: lapsed).
func (l *leaderLease) remaining(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until.IsZero() {
		return 0
	}
	return l.until.Sub(now)
}

// held answers whether a delivery may be pushed before its lease commits;
// when less than half the lease is left it asks for a renewal, so a busy
// leader keeps it and an idle one issues no reads.
func (l *leaderLease) held(now time.Time) bool {
	left := l.remaining(now)
	if l.timeout > 0 && left < l.timeout/2 {
		select {
		case l.renew <- struct{}{}:
		default:
		}
	}
	return left > 0
}

// renewals is signalled when a round asked for a renewal.
func (l *leaderLease) renewals() <-chan struct{} { return l.renew }
