package dispatch

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestFence(t *testing.T) {
	f := newFence()
	before := f.mark()
	if !f.clearSince(before) {
		t.Fatalf("clearSince(mark) with no change = false, want true")
	}
	end := f.begin()
	if f.clearSince(before) {
		t.Fatalf("clearSince(mark before a change began) = true, want false")
	}
	during := f.mark()
	if f.clearSince(during) {
		t.Fatalf("clearSince(mark while a change is pending) = true, want false")
	}
	end(nil)
	end(nil) // a second call does nothing
	after := f.mark()
	if !f.clearSince(after) {
		t.Fatalf("clearSince(mark after the change ended) = false, want true")
	}
	if f.clearSince(during) {
		t.Fatalf("clearSince(mark taken while pending) = true after the change ended, want false")
	}
	if n := f.pending.Load(); n != 0 {
		t.Fatalf("pending = %d after end was called twice, want 0", n)
	}
}

// A change whose proposal failed may still commit: it stays pending for
// settleAfterError.
func TestFenceFailedChangeStaysPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFence()
		f.begin()(errors.New("proposal timed out"))
		time.Sleep(f.settleAfterError - time.Millisecond)
		synctest.Wait()
		if f.clearSince(f.mark()) {
			t.Fatalf("clearSince(mark) just before the failed change settles = true, want false")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !f.clearSince(f.mark()) {
			t.Fatalf("clearSince(mark) after the failed change settled = false, want true")
		}
	})
}
