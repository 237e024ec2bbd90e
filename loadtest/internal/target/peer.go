package target

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// peerServer is the one server process of a peer system (Redis,
// beanstalkd, NATS): its binary and arguments, its data directory (which
// also holds its log, <log>.log), and the running process. It gives the
// peers their Pids, DataDirs, restart and stop.
type peerServer struct {
	name, path, dir, log string
	args                 []string
	procs                []*proc.Process // the one running process, once started
}

func (s *peerServer) startProc() (*proc.Process, error) {
	return proc.Start(s.name, s.path, filepath.Join(s.dir, s.log+".log"), s.args...)
}

// start starts the server process.
func (s *peerServer) start() error {
	p, err := s.startProc()
	if err != nil {
		return err
	}
	s.procs = []*proc.Process{p}
	return nil
}

// waitReady polls ready every 20ms until it succeeds, the process exits,
// ctx ends or timeout passes.
func (s *peerServer) waitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return proc.WaitFor(ctx, 20*time.Millisecond, ready, s.procs...)
}

func (s *peerServer) Pids() []int        { return []int{s.procs[0].Pid()} }
func (s *peerServer) DataDirs() []string { return []string{s.dir} }

// restart stops the server gracefully and starts it again, then waits
// until ready answers; it returns the moment the new process started.
func (s *peerServer) restart(ctx context.Context, ready func(context.Context) error) (time.Time, error) {
	started, err := restartProcs(s.procs, func(int) (*proc.Process, error) { return s.startProc() })
	if err != nil {
		return started, err
	}
	return started, ready(ctx)
}

// stop stops the server process by pid.
func (s *peerServer) stop() error {
	var errs []error
	for _, p := range s.procs {
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

// runWorkers runs max(1, n) workers at once and joins their errors.
func runWorkers(n int, work func() error) error {
	var wg sync.WaitGroup
	errs := make([]error, max(1, n))
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = work()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
