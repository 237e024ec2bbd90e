package framework

import (
	"testing"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// WaitFor polls fn with proc.Poll (every 50 ms) until it returns nil, and
// fails t with fn's last error once timeout has passed.
func WaitFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	if err := proc.Poll(timeout, fn); err != nil {
		t.Fatalf("WaitFor(%v): %v", timeout, err)
	}
}

// MustFreeAddr is proc.FreeAddr for tests.
func MustFreeAddr(t testing.TB) string {
	t.Helper()
	a, err := proc.FreeAddr()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return a
}
