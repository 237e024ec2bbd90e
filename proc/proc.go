// Package proc starts, stops and waits for the server processes of a Sundial
// cluster on loopback: the one process launcher, port allocator and WaitFor
// shared by the process-cluster tests (tests/framework), the load generator
// (loadtest) and `make run` (proc/cmd/sundial-local). It imports only the
// standard library, so none of its users links the broker's storage engine
// or consensus library through it.
//
// What it owns:
//   - Process: one child process in its own process group, output appended
//     to a log file; Stop (SIGTERM, then SIGKILL after StopTimeout), Kill,
//     Pause/Resume (SIGSTOP/SIGCONT), Tail of its log.
//   - FreeAddr: loopback ports in 20000-31999 (below Linux's ephemeral
//     range), each held by an flock so processes allocating at once never
//     hand out the same port.
//   - WaitFor and Poll: the one polling loop, with HTTP200 and TCPOpen
//     checks.
//   - RSSBytes and DiskBytes: what a benchmark reports about a process.
//
// Invariants: every Process is stopped by its own pid, never by name; every
// wait is bounded by a context or a deadline. A Process owns one goroutine
// (the cmd.Wait reaper), started in Start and ended when the process exits;
// its methods may be called from any goroutine.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotFound reports a server binary missing from PATH.
var ErrNotFound = errors.New("proc: binary not found")

// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
const StopTimeout = 15 * time.Second

// Process is one running server process.
type Process struct {
	Name    string
	Path    string
	Args    []string
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's result, set before done closes

	mu     sync.Mutex // guards paused
	paused bool
}

// Look finds name on PATH (and in extra directories tried first) and
// returns its path, or an error wrapping ErrNotFound that says so.
func Look(name string, extraDirs ...string) (string, error) {
	for _, d := range extraDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s is not on PATH", ErrNotFound, name)
	}
	return p, nil
}

// Start runs path with args, output appended to logPath.
func Start(name, path, logPath string, args ...string) (*Process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "# %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C in the terminal reaches only the parent,
	// which then stops its children by pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("proc: start %s: %w", name, err)
	}
	p := &Process{Name: name, Path: path, Args: args, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended (cmd.Wait's error; nil for exit status 0),
// or nil while it runs.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Stop sends SIGTERM (after SIGCONT, should the process be paused), waits
// up to StopTimeout, then SIGKILLs. It is safe to call more than once.
func (p *Process) Stop() error {
	if p.Exited() {
		return nil
	}
	_ = p.Resume()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(StopTimeout):
	}
	return p.Kill()
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("proc: %s (pid %d) did not exit after SIGKILL", p.Name, p.Pid())
	}
}

// Pause freezes the process (SIGSTOP): its sockets stay open and silent.
func (p *Process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Exited() || p.paused {
		return nil
	}
	p.paused = true
	return p.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Exited() || !p.paused {
		return nil
	}
	p.paused = false
	return p.cmd.Process.Signal(syscall.SIGCONT)
}

// Paused reports whether Pause holds the process.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Tail returns the last n bytes of the process log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
