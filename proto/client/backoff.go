package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff describes exponential backoff with jitter: the n-th wait (from 0)
// is drawn uniformly from [d/2, d] where d = min(Max, Initial·Multiplier^n).
type Backoff struct {
	Initial    time.Duration // first wait; default 50ms
	Max        time.Duration // cap of a single wait; default 5s
	Multiplier float64       // growth per attempt; default 2
}

// DefaultBackoff is 50ms doubling up to 5s.
func DefaultBackoff() Backoff {
	return Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}
}

// Delay returns the jittered wait before retry number attempt (0-based).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.ceiling(attempt)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func (b Backoff) ceiling(attempt int) time.Duration {
	initial, maxDelay, mult := b.Initial, b.Max, b.Multiplier
	if initial <= 0 {
		initial = 50 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = 5 * time.Second
	}
	if mult < 1 {
		mult = 2
	}
	d := float64(initial)
	for i := 0; i < attempt && d < float64(maxDelay); i++ {
		d *= mult
	}
	if d > float64(maxDelay) {
		d = float64(maxDelay)
	}
	return time.Duration(d)
}

// sleep waits d or until ctx ends; it reports whether the wait completed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
