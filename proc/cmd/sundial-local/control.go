package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The control socket lets "sundial-local restart NAME" (another shell) ask
// the running "sundial-local" to start one of its exited processes again, so
// the restarted process stays owned by the run and Ctrl-C stops it too.
//
// Protocol, one request per connection: the client writes "restart NAME\n";
// the server writes progress lines, then a last line "ok", or "error: ..."
// and the error's further lines (a log tail), and closes the connection.

// controlPath is the socket of the run whose data directory is dataDir.
func controlPath(dataDir string) string { return filepath.Join(dataDir, "control.sock") }

// restartTimeout bounds how long a restart waits for the process's /readyz.
const restartTimeout = 2 * time.Minute

// control serves the control socket of one run.
type control struct {
	l    net.Listener
	path string
	s    *supervisor
	stop context.CancelFunc
	wg   sync.WaitGroup // the accept loop and one goroutine per connection
}

// listenControl serves path for s until Close; restarts in progress end
// with ctx or Close. The caller has checked that no other run
// uses this data directory (its ports are free), so a socket file left by a
// run that was killed is removed.
func listenControl(ctx context.Context, path string, s *supervisor) (*control, error) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &control{l: l, path: path, s: s, stop: cancel}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.serve(ctx, conn)
			}()
		}
	}()
	return c, nil
}

func (c *control) serve(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return
	}
	name, ok := strings.CutPrefix(strings.TrimSpace(line), "restart ")
	if !ok {
		fmt.Fprintf(conn, "error: unknown request %q\n", strings.TrimSpace(line))
		return
	}
	if err := c.s.restart(ctx, name, restartTimeout, conn); err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return
	}
	fmt.Fprintln(conn, "ok")
}

// Close stops serving, cancels restarts in progress, waits for the
// connections and removes the socket file.
func (c *control) Close() error {
	err := c.l.Close()
	c.stop()
	c.wg.Wait()
	_ = os.Remove(c.path)
	return err
}

// runRestart asks the run of cfg's data directory to start process arg
// (2, broker-2 or proxy) again, copying its progress to out.
func runRestart(ctx context.Context, cfg Config, arg string, out io.Writer) error {
	name, err := processName(arg)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", controlPath(cfg.DataDir))
	if err != nil {
		return fmt.Errorf("no 'make run' is running on %s (%w): start the cluster with 'make run'", cfg.DataDir, err)
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	if _, err := fmt.Fprintf(conn, "restart %s\n", name); err != nil {
		return err
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ok":
			return nil
		case strings.HasPrefix(line, "error: "):
			// An error may span lines (a log tail): the rest of the
			// answer, up to the close, is part of it.
			msg := []string{strings.TrimPrefix(line, "error: ")}
			for sc.Scan() {
				msg = append(msg, sc.Text())
			}
			return errors.New(strings.Join(msg, "\n"))
		}
		fmt.Fprintln(out, line)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("the run on %s closed the control socket before answering", cfg.DataDir)
}
