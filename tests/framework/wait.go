package framework

import (
	"testing"
	"time"
)

// WaitFor polls fn every 50 ms until it returns nil, and fails t with fn's
// last error once timeout has passed.
func WaitFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	if err := Poll(timeout, fn); err != nil {
		t.Fatalf("WaitFor(%v): %v", timeout, err)
	}
}

// Poll is WaitFor's loop for code without a testing.TB: it returns nil as
// soon as fn does, or fn's last error after timeout.
func Poll(timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
