package target

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proc"
)

// beanstalkQueue uses beanstalkd's own delayed jobs: put with a delay in
// whole seconds (beanstalkd's unit; the driver rounds the delay up and
// rewrites the payload's due time to the one it asked for), reserve, delete.
// A batch is its puts pipelined on one connection; each consumer worker is
// one connection doing reserve then delete.
type beanstalkQueue struct {
	peerServer
	addr string
	tube string

	mu   sync.Mutex // guards pool
	pool []*beanstalk.Conn
}

// beanstalkTTR is the time-to-run (lease) of a reserved job.
const beanstalkTTR = 30 * time.Second

func startBeanstalkd(ctx context.Context, spec Spec, opts Options) (Instance, error) {
	path, err := spec.BinaryPath()
	if err != nil {
		return nil, err
	}
	fsync := "-f0"
	if spec.Name == "beanstalkd-f1000" {
		fsync = "-f1000"
	}
	dir := filepath.Join(opts.Dir, spec.Name)
	if err := os.MkdirAll(filepath.Join(dir, "binlog"), 0o755); err != nil {
		return nil, err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := splitHostPort(addr)
	q := &beanstalkQueue{addr: addr, tube: opts.queue(), peerServer: peerServer{name: "beanstalkd", path: path, dir: dir, log: "beanstalkd",
		args: []string{"-l", "127.0.0.1", "-p", port, "-b", filepath.Join(dir, "binlog"), fsync}}}
	if err := q.start(); err != nil {
		return nil, err
	}
	if err := q.waitReady(ctx, 120*time.Second, q.ready); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// ready answers nil once beanstalkd answers a stats request.
func (q *beanstalkQueue) ready(context.Context) error {
	c, err := beanstalk.DialTimeout("tcp", q.addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Stats()
	return err
}

func (q *beanstalkQueue) conn() (*beanstalk.Conn, error) {
	q.mu.Lock()
	if n := len(q.pool); n > 0 {
		c := q.pool[n-1]
		q.pool = q.pool[:n-1]
		q.mu.Unlock()
		return c, nil
	}
	q.mu.Unlock()
	return beanstalk.DialTimeout("tcp", q.addr, 5*time.Second)
}

func (q *beanstalkQueue) release(c *beanstalk.Conn, broken bool) {
	if broken {
		c.Close()
		return
	}
	q.mu.Lock()
	q.pool = append(q.pool, c)
	q.mu.Unlock()
}

func (q *beanstalkQueue) Publish(ctx context.Context, msgs []scenario.Message) error {
	c, err := q.conn()
	if err != nil {
		return err
	}
	tube := beanstalk.NewTube(c, q.tube)
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		now := time.Now()
		delay := max(m.Due.Sub(now), 0)
		delay = (delay + time.Second - 1).Truncate(time.Second)
		scenario.SetDue(m.Payload, now.Add(delay))
		wg.Add(1)
		// Puts from several goroutines are pipelined on the connection
		// (textproto sequences requests and responses).
		go func() {
			defer wg.Done()
			_, errs[i] = tube.Put(m.Payload, 1024, delay, beanstalkTTR)
		}()
	}
	wg.Wait()
	err = errors.Join(errs...)
	q.release(c, err != nil)
	if err != nil {
		return err
	}
	return ctx.Err()
}

func (q *beanstalkQueue) Consume(ctx context.Context, opts scenario.ConsumeOptions, handle func(scenario.Delivery)) error {
	return runWorkers(opts.Workers, func() error { return q.consumeWorker(ctx, handle) })
}

func (q *beanstalkQueue) consumeWorker(ctx context.Context, handle func(scenario.Delivery)) error {
	c, err := beanstalk.DialTimeout("tcp", q.addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	ts := beanstalk.NewTubeSet(c, q.tube)
	for ctx.Err() == nil {
		id, body, err := ts.Reserve(200 * time.Millisecond)
		if errors.Is(err, beanstalk.ErrTimeout) {
			continue
		}
		if err != nil {
			return fmt.Errorf("target: beanstalkd reserve: %w", err)
		}
		recv := time.Now()
		if err := c.Delete(id); err != nil {
			return fmt.Errorf("target: beanstalkd delete: %w", err)
		}
		handle(scenario.Delivery{Payload: body, Received: recv})
	}
	return nil
}

func (q *beanstalkQueue) Restart(ctx context.Context) (time.Time, error) {
	q.dropPool()
	return q.restart(ctx, func(ctx context.Context) error { return q.waitReady(ctx, 120*time.Second, q.ready) })
}

func (q *beanstalkQueue) dropPool() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, c := range q.pool {
		c.Close()
	}
	q.pool = nil
}

func (q *beanstalkQueue) Close() error {
	q.dropPool()
	return q.stop()
}
