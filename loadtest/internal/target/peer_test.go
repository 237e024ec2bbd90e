package target

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestPeerServer runs the process lifecycle every peer shares on a real
// process (sleep): start, Pids and DataDirs, restart (a new process,
// waited on), stop.
func TestPeerServer(t *testing.T) {
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	dir := t.TempDir()
	s := &peerServer{name: "sleep", path: path, dir: dir, log: "sleep", args: []string{"600"}}
	if err := s.start(); err != nil {
		t.Fatalf("start() = %v, want nil", err)
	}
	defer func() { _ = s.stop() }()
	if err := s.waitReady(context.Background(), 10*time.Second, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("waitReady() = %v, want nil", err)
	}
	first := s.Pids()
	if len(first) != 1 || first[0] <= 0 {
		t.Fatalf("Pids() = %v, want one pid", first)
	}
	if got := s.DataDirs(); !slices.Equal(got, []string{dir}) {
		t.Errorf("DataDirs() = %v, want [%s]", got, dir)
	}
	readied := 0
	started, err := s.restart(context.Background(), func(context.Context) error { readied++; return nil })
	if err != nil || started.IsZero() || readied != 1 {
		t.Fatalf("restart() = %v, %v with ready called %d times, want a start time, nil, 1", started, err, readied)
	}
	if again := s.Pids(); again[0] == first[0] {
		t.Errorf("Pids() after restart = %v, want a new process (was %v)", again, first)
	}
	if _, err := os.Stat(filepath.Join(dir, "sleep.log")); err != nil {
		t.Errorf("no log %s: %v", filepath.Join(dir, "sleep.log"), err)
	}
	if err := s.stop(); err != nil {
		t.Errorf("stop() = %v, want nil", err)
	}
	if !s.procs[0].Exited() {
		t.Errorf("process %d still runs after stop()", s.procs[0].Pid())
	}
}

// TestRunWorkers checks the consumer fan-out of the peers: at least one
// worker, all of them run, their errors joined.
func TestRunWorkers(t *testing.T) {
	errA := errors.New("worker failed")
	cases := []struct {
		name    string
		n       int
		fail    bool
		wantRun int32
	}{
		{"zero runs one", 0, false, 1},
		{"four", 4, false, 4},
		{"errors joined", 3, true, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ran atomic.Int32
			err := runWorkers(tc.n, func() error {
				ran.Add(1)
				if tc.fail {
					return errA
				}
				return nil
			})
			if ran.Load() != tc.wantRun {
				t.Errorf("runWorkers(%d) ran %d workers, want %d", tc.n, ran.Load(), tc.wantRun)
			}
			if got := errors.Is(err, errA); got != tc.fail {
				t.Errorf("runWorkers(%d) = %v, want errors.Is(err, errA) %v", tc.n, err, tc.fail)
			}
		})
	}
}
