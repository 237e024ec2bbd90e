// Package proc starts and stops the server processes loadtest measures
// (Sundial brokers and proxy, redis-server, beanstalkd, nats-server) on
// loopback, and reads what a benchmark reports about them: resident memory
// from /proc/PID/status and bytes on disk under a data directory.
//
// Invariants: every Process is stopped by its own pid (SIGTERM, then SIGKILL
// after a grace period), never by name; every wait is bounded by a context or
// a deadline. A Process owns one goroutine (the cmd.Wait reaper), started in
// Start and joined in Stop/Kill.
package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
	log  *os.File
	done chan struct{}
	err  error // cmd.Wait's result, set before done closes
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
		return "", fmt.Errorf("%w: %s is not on PATH (run scripts/install-peers.sh)", ErrNotFound, name)
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
	fmt.Fprintf(logf, "# %s %s %s\n", time.Now().UTC().Format(time.RFC3339), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C to loadtest reaches only loadtest, which
	// then stops its children by pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("proc: start %s: %w", name, err)
	}
	p := &Process{Name: name, Path: path, Args: args, LogPath: logPath, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
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

// Stop sends SIGTERM and waits up to StopTimeout, then SIGKILLs. It is safe
// to call more than once.
func (p *Process) Stop() error {
	if p.Exited() {
		return nil
	}
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

// nextPort walks ports 20000-31999, below Linux's ephemeral range
// (32768-60999): a port handed out here and bound a moment later cannot
// meanwhile become the source port of some outgoing connection. Each
// process starts at its own offset.
var nextPort atomic.Int64

func init() { nextPort.Store(int64(os.Getpid()*97) % 12000) }

// FreeAddr returns a loopback address with a port that was free a moment
// ago and is handed out once per process.
func FreeAddr() (string, error) {
	for range 12000 {
		port := 20000 + nextPort.Add(1)%12000
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr, nil
	}
	return "", errors.New("proc: no free port in 20000-31999")
}

// WaitFor polls check every interval until it returns nil, ctx ends or
// one of procs exits; it returns check's last error on timeout.
func WaitFor(ctx context.Context, interval time.Duration, check func(context.Context) error, procs ...*Process) error {
	var last error
	for {
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("proc: %s (pid %d) exited during start-up; log tail:\n%s", p.Name, p.Pid(), p.Tail(2000))
			}
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// HTTP200 is a WaitFor check: GET url answers 200.
func HTTP200(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		return nil
	}
}

// TCPOpen is a WaitFor check: addr accepts connections.
func TCPOpen(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// RSSBytes is the resident set size of pid (VmRSS in /proc/PID/status).
func RSSBytes(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("proc: no VmRSS for pid %d", pid)
}

// DiskBytes is the allocated size of every regular file under dir (like
// du -s: blocks, so preallocated but unwritten space counts).
func DiskBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total, err
}
