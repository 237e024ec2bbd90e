package proc

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// WaitFor polls check every interval until it returns nil, ctx ends or
// one of procs exits; it returns check's last error on timeout.
func WaitFor(ctx context.Context, interval time.Duration, check func(context.Context) error, procs ...*Process) error {
	var last error
	for {
		for _, p := range procs {
			if p.Exited() {
				return fmt.Errorf("proc: %s (pid %d) exited while waiting; log tail:\n%s", p.Name, p.Pid(), p.Tail(2000))
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
func HTTP200(url string) func(context.Context) error { return HTTP200Client(http.DefaultClient, url) }

// HTTP200Client is HTTP200 with client (for an https URL, one that
// trusts the server's CA).
func HTTP200Client(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
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

// Poll is WaitFor for a check without a context, every 50 ms, for up to
// timeout: it returns nil as soon as check does, or check's last error.
func Poll(timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	err := WaitFor(ctx, 50*time.Millisecond, func(context.Context) error {
		last = check()
		return last
	})
	if err != nil && last != nil {
		return last
	}
	return err
}
