package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
const stopTimeout = 15 * time.Second

// Process is one child process with its output appended to LogPath.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex // guards paused
	paused bool
}

// StartProcess runs path with args, stdout and stderr appended to logPath.
func StartProcess(name, path, logPath string, args ...string) (*Process, error) {
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
	// Own process group: a Ctrl-C to the test reaches only the test, which
	// then stops its children by pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("framework: start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("framework: %s (pid %d) did not exit after SIGKILL", p.Name, p.Pid())
	}
}

// Stop sends SIGTERM (after SIGCONT, should the process be paused), waits
// up to 15 s, then SIGKILLs. It is safe to call more than once.
func (p *Process) Stop() error {
	if p.Exited() {
		return nil
	}
	_ = p.Resume()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
	}
	return p.Kill()
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
