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
	mu      sync.Mutex    // guards until, ended, early and drained
	until   time.Time
	ended   bool // given up for good (a leadership transfer began)
	// early counts the lease proposals in flight whose copies were pushed
	// before their commit; drained, made by end, is closed once none is.
	early   int
	drained chan struct{}
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

// end gives the lease up for the rest of this leadership and returns a
// channel closed once every lease proposal counted by pushEarly was
// answered.
func (l *leaderLease) end() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended, l.until = true, time.Time{}
	if l.drained == nil {
		l.drained = make(chan struct{})
		if l.early == 0 {
			close(l.drained)
		}
	}
	return l.drained
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

// pushEarly answers whether the copies of a lease proposal in flight may
// be pushed before it commits, and if so counts the proposal until
// answered is called for it: end waits for those. When less than half the
// lease is left it asks for a renewal, so a busy leader keeps it and an
// idle one issues no reads.
func (l *leaderLease) pushEarly(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var left time.Duration
	if !l.until.IsZero() {
		left = l.until.Sub(now)
	}
	if l.timeout > 0 && left < l.timeout/2 {
		select {
		case l.renew <- struct{}{}:
		default:
		}
	}
	if left <= 0 {
		return false
	}
	l.early++
	return true
}

// answered is told that a proposal pushEarly counted was answered.
func (l *leaderLease) answered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.early--
	if l.early == 0 && l.drained != nil {
		select {
		case <-l.drained:
		default:
			close(l.drained)
		}
	}
}

// renewals is signalled when a round asked for a renewal.
func (l *leaderLease) renewals() <-chan struct{} { return l.renew }
