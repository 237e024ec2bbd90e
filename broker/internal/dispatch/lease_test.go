package dispatch

import (
	"testing"
	"time"
)

func TestLeaderLease(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	asked := func(l *leaderLease) bool {
		select {
		case <-l.renewals():
			return true
		default:
			return false
		}
	}
	tests := []struct {
		name      string
		timeout   time.Duration
		confirmed []int // issue times of reads that passed (ms after t0)
		end       bool
		now       int
		held      bool
		renew     bool
	}{
		{"no lease configured", 0, []int{0}, false, 1, false, false},
		{"not confirmed yet", 100 * time.Millisecond, nil, false, 0, false, true},
		{"fresh", 100 * time.Millisecond, []int{0}, false, 40, true, false},
		{"less than half left", 100 * time.Millisecond, []int{0}, false, 60, true, true},
		{"lapsed", 100 * time.Millisecond, []int{0}, false, 100, false, true},
		{"counted from the latest read", 100 * time.Millisecond, []int{0, 80}, false, 120, true, false},
		{"an older read does not shorten it", 100 * time.Millisecond, []int{80, 0}, false, 120, true, false},
		{"ended for good", 100 * time.Millisecond, []int{0}, true, 10, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLeaderLease(tt.timeout)
			for _, ms := range tt.confirmed {
				l.confirmed(at(ms))
			}
			if tt.end {
				l.end()
				l.confirmed(at(5)) // a read passing after the end gives nothing back
			}
			if got := l.pushEarly(at(tt.now)); got != tt.held {
				t.Fatalf("pushEarly(+%dms) = %v, want %v", tt.now, got, tt.held)
			}
			if got := asked(l); got != tt.renew {
				t.Fatalf("pushEarly(+%dms) asked for a renewal = %v, want %v", tt.now, got, tt.renew)
			}
		})
	}
}

// Ending the lease waits for every proposal whose copies went out before
// their commit: a leadership transfer started sooner could drop one, and
// the copies it delivered would then be due again on the next leader.
func TestEndLeaseWaitsForEarlyPushes(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	l := newLeaderLease(100 * time.Millisecond)
	l.confirmed(t0)
	for range 2 { // two proposals in flight
		if !l.pushEarly(t0) {
			t.Fatalf("pushEarly on a fresh lease = false, want true")
		}
	}
	drained := l.end()
	if l.pushEarly(t0) {
		t.Fatalf("pushEarly after end = true, want false")
	}
	l.answered()
	select {
	case <-drained:
		t.Fatalf("end's channel closed with a proposal still unanswered")
	default:
	}
	l.answered()
	select {
	case <-drained:
	default:
		t.Fatalf("end's channel still open after every proposal was answered")
	}
	select {
	case <-l.end(): // a second transfer request finds nothing in flight
	default:
		t.Fatalf("a second end waits though nothing is in flight")
	}
}
