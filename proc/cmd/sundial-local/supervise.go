package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// spec is how one process of the cluster is started (and started again).
type spec struct {
	name    string // broker-N or proxy
	bin     string
	args    []string
	readyz  string // its /readyz URL
	logPath string // appended to by every start
	// https is the client for an https readyz (the secure proxy's), nil
	// for http.DefaultClient.
	https *http.Client
}

// client is the HTTP client readyz is asked with.
func (s spec) client() *http.Client {
	if s.https != nil {
		return s.https
	}
	return http.DefaultClient
}

// child is one started process.
type child struct {
	spec
	p *proc.Process
}

// supervisor owns the processes of one run: it starts them, reports a
// process that exits on its own (the others keep running), starts one again
// on request, and stops them all by pid.
//
// Goroutines: run's goroutine calls start, supervise and stopAll; the
// control socket's goroutines call restart; one goroutine per started
// process waits for its exit and hands it to supervise.
type supervisor struct {
	out       io.Writer
	pidFile   string
	proxyHTTP string        // asked, when a broker exits, whether it was removed
	sec       *secure       // the secure cluster's files; nil for a plaintext one
	exited    chan *child   // a process ended; read by supervise
	quit      chan struct{} // closed by stopAll: exit waiters give up

	mu       sync.Mutex // guards order, current, stopping
	order    []string   // names in start order
	current  map[string]*child
	stopping bool
}

func newSupervisor(out io.Writer, pidFile, proxyHTTP string) *supervisor {
	return &supervisor{out: out, pidFile: pidFile, proxyHTTP: proxyHTTP, exited: make(chan *child), quit: make(chan struct{}), current: map[string]*child{}}
}

// start starts sp's process (a first start or a restart of the same name)
// and records its pid in the pid file.
func (s *supervisor) start(sp spec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fmt.Errorf("the cluster is stopping")
	}
	_, restart := s.current[sp.name]
	if !restart {
		// The previous run's log is kept as <name>.log.1; a restart appends.
		if _, err := os.Stat(sp.logPath); err == nil {
			if err := os.Rename(sp.logPath, sp.logPath+".1"); err != nil {
				return err
			}
		}
	}
	p, err := proc.Start(sp.name, sp.bin, sp.logPath, sp.args...)
	if err != nil {
		return err
	}
	c := &child{spec: sp, p: p}
	if !restart {
		s.order = append(s.order, sp.name)
	}
	s.current[sp.name] = c
	fmt.Fprintf(s.out, "started %s (pid %d), log %s\n", sp.name, p.Pid(), sp.logPath)
	go func() {
		<-p.Done()
		select {
		case s.exited <- c:
		case <-s.quit:
		}
	}()
	return s.writePidsLocked()
}

// writePidsLocked rewrites the pid file with the running processes.
func (s *supervisor) writePidsLocked() error {
	var b strings.Builder
	for _, name := range s.order {
		if c := s.current[name]; !c.p.Exited() {
			fmt.Fprintf(&b, "%d %s\n", c.p.Pid(), name)
		}
	}
	return os.WriteFile(s.pidFile, []byte(b.String()), 0o644)
}

// list is the current process of every name, in start order.
func (s *supervisor) list() []*child {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*child, 0, len(s.order))
	for _, name := range s.order {
		out = append(out, s.current[name])
	}
	return out
}

// supervise reports every process that exits until ctx ends.
func (s *supervisor) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-s.exited:
			s.mu.Lock()
			_ = s.writePidsLocked()
			s.mu.Unlock()
			next := "The other processes keep running. Start it again with:\n  " + restartHint(c.name)
			if s.removed(ctx, c.name) {
				next = fmt.Sprintf("The other processes keep running. %s was removed from the cluster (shardctl remove-node), so it is not started again\n"+
					"(a removed node id never serves again; the next 'make run' leaves it out). 'make join' adds a new broker.", c.name)
			}
			fmt.Fprintf(s.out, "\nsundial-local: %s (pid %d) exited (%s); its log is %s, last lines:\n%s\n%s\n\n",
				c.name, c.p.Pid(), exitStatus(c.p), c.logPath, indent(c.p.Tail(2000)), next)
		}
	}
}

// removed reports whether name is a broker the cluster removed: recorded
// in the data dir, or reported now by the proxy (and then recorded).
func (s *supervisor) removed(ctx context.Context, name string) bool {
	n, ok := strings.CutPrefix(name, "broker-")
	id, err := strconv.Atoi(n)
	if !ok || err != nil {
		return false
	}
	return noteRemoved(ctx, filepath.Dir(s.pidFile), s.proxyHTTP, s.sec, s.out)[id]
}

// exitStatus says how p ended.
func exitStatus(p *proc.Process) string {
	if err := p.Err(); err != nil {
		return err.Error()
	}
	return "exit status 0"
}

// restartHint is the command a newcomer types to start name again.
func restartHint(name string) string {
	if n, ok := strings.CutPrefix(name, "broker-"); ok {
		return fmt.Sprintf("make restart-broker N=%s   (or: bin/sundial-local restart %s)", n, n)
	}
	return "make restart-proxy   (or: bin/sundial-local restart proxy)"
}

// restart starts the exited process name again with the arguments of its
// first start, writes progress to w, and waits up to timeout for its
// /readyz. A running process is not touched.
func (s *supervisor) restart(ctx context.Context, name string, timeout time.Duration, w io.Writer) error {
	s.mu.Lock()
	c, ok := s.current[name]
	names := slices.Clone(s.order)
	s.mu.Unlock()
	switch {
	case !ok && strings.HasPrefix(name, "broker-"):
		return fmt.Errorf("%s is not a broker of this 'make run' (it runs %s); a broker started by 'make join' restarts with 'make join' on its slot", name, strings.Join(names, ", "))
	case !ok:
		return fmt.Errorf("no process %q in this 'make run' (it runs %s)", name, strings.Join(names, ", "))
	case !c.p.Exited():
		return fmt.Errorf("%s is running (pid %d): stop it first (kill %d) to try a failover", name, c.p.Pid(), c.p.Pid())
	case s.removed(ctx, name):
		return fmt.Errorf("%s was removed from the cluster (shardctl remove-node): a removed node id never serves again, so it is not started; 'make join' adds a new broker", name)
	}
	if err := s.start(c.spec); err != nil {
		return err
	}
	s.mu.Lock()
	nc := s.current[name]
	s.mu.Unlock()
	fmt.Fprintf(w, "started %s (pid %d), log %s\n", name, nc.p.Pid(), nc.logPath)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := proc.WaitFor(wctx, 500*time.Millisecond, proc.HTTP200Client(nc.client(), nc.readyz), nc.p); err != nil {
		return fmt.Errorf("%s is not ready (%w); see its log %s", name, err, nc.logPath)
	}
	fmt.Fprintf(w, "%s is ready (%s answers 200)\n", name, nc.readyz)
	return nil
}

// stopAll stops every running process by pid, all at once (SIGTERM, then
// SIGKILL after proc.StopTimeout), and empties the pid file.
func (s *supervisor) stopAll() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	close(s.quit)
	children := make([]*child, 0, len(s.order))
	for _, name := range s.order {
		children = append(children, s.current[name])
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range children {
		if c.p.Exited() {
			continue
		}
		fmt.Fprintf(s.out, "stopping %s (pid %d)\n", c.name, c.p.Pid())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.p.Stop(); err != nil {
				fmt.Fprintf(s.out, "sundial-local: %v\n", err)
			}
		}()
	}
	wg.Wait()
	if len(children) > 0 {
		_ = os.WriteFile(s.pidFile, nil, 0o644)
		fmt.Fprintf(s.out, "sundial-local: stopped; data kept in %s\n", filepath.Dir(s.pidFile))
	}
}

// processName turns what a user types after "restart" (2, broker-2,
// proxy) into a process name.
func processName(arg string) (string, error) {
	if arg == "proxy" {
		return arg, nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(arg, "broker-"))
	if err != nil || n < 1 || n > maxBroker {
		return "", fmt.Errorf("restart takes a broker number (1..%d), broker-N or proxy, got %q", maxBroker, arg)
	}
	return fmt.Sprintf("broker-%d", n), nil
}
