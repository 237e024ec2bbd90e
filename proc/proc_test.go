package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFreeAddrHandsOutLockedDistinctPorts(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatalf("FreeAddr() error = %v", err)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr() = %s twice", addr)
		}
		seen[addr] = true
		// Another process (here: another open file description) cannot take
		// the port's lock while this process holds it.
		port := addr[strings.LastIndex(addr, ":")+1:]
		f, err := os.Open(filepath.Join(os.TempDir(), "sundial-ports", port+".lock"))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			t.Fatalf("lock of %s taken while FreeAddr holds it", addr)
		}
		f.Close()
	}
}

func TestPollReturnsTheChecksLastError(t *testing.T) {
	calls := 0
	errNotYet := errors.New("not yet")
	if err := Poll(0, func() error { calls++; return errNotYet }); !errors.Is(err, errNotYet) {
		t.Fatalf("Poll(0, failing) = %v, want %v", err, errNotYet)
	}
	if calls < 1 {
		t.Fatalf("Poll(0, ...) called check %d times, want at least once", calls)
	}
	calls = 0
	if err := Poll(time.Minute, func() error {
		calls++
		if calls < 3 {
			return errNotYet
		}
		return nil
	}); err != nil {
		t.Fatalf("Poll(succeeds on the third call) = %v, want nil", err)
	}
}

func TestWaitForStopsWhenAProcessExits(t *testing.T) {
	p, err := Start("false", "/bin/sh", filepath.Join(t.TempDir(), "sh.log"), "-c", "echo bye; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = WaitFor(ctx, 10*time.Millisecond, func(context.Context) error { return errors.New("never ready") }, p)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("WaitFor(exiting process) = %v, want an exit report with the log tail before the deadline", err)
	}
	if p.Err() == nil {
		t.Fatalf("Err() of a process that exited 3 = nil")
	}
}

func TestPausedProcessStops(t *testing.T) {
	p, err := Start("sleep", "/bin/sleep", filepath.Join(t.TempDir(), "sleep.log"), "600")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if !p.Paused() {
		t.Fatal("Paused() = false after Pause")
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop() of a paused process = %v", err)
	}
	if !p.Exited() {
		t.Fatal("Exited() = false after Stop")
	}
}
