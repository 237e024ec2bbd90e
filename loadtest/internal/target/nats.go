package target

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proc"
)

// natsQueue uses JetStream message schedules (nats-server ≥ 2.12, ADR-51):
// a stream with AllowMsgSchedules holds one schedule message per delayed
// message on its own subject (a subject holds one schedule), carrying
// "Nats-Schedule: @at <time>" and "Nats-Schedule-Target: <stream>.due";
// when due the server publishes the body to the target subject in the same
// stream, where a durable pull consumer delivers it. A batch is its
// messages published asynchronously, then every PubAck awaited. Each
// consumer worker is one Consume subscription with Prefetch messages
// pulled; a delivery is acked with Ack.
type natsQueue struct {
	peerServer
	addr        string
	nc          *nats.Conn
	js          jetstream.JetStream
	stream      string
	schedPrefix string
	target      string
}

func startNATS(ctx context.Context, spec Spec, opts Options) (Instance, error) {
	path, err := spec.BinaryPath()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(opts.Dir, spec.Name)
	if err := os.MkdirAll(filepath.Join(dir, "js"), 0o755); err != nil {
		return nil, err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := splitHostPort(addr)
	sync := ""
	if spec.Name == "nats-always" {
		sync = "  sync_interval: always\n"
	}
	conf := fmt.Sprintf("host: %s\nport: %s\njetstream {\n  store_dir: %q\n%s}\n", host, port, filepath.Join(dir, "js"), sync)
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	name := opts.queue()
	q := &natsQueue{addr: addr, stream: name, schedPrefix: name + ".sched.", target: name + ".due",
		peerServer: peerServer{name: "nats-server", path: path, dir: dir, log: "nats", args: []string{"-c", filepath.Join(dir, "nats.conf")}}}
	if err := q.start(); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := proc.WaitFor(wctx, 20*time.Millisecond, proc.TCPOpen(addr), q.procs...); err != nil {
		q.Close()
		return nil, err
	}
	q.nc, err = nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectBufSize(64<<20))
	if err != nil {
		q.Close()
		return nil, err
	}
	q.js, err = jetstream.New(q.nc, jetstream.WithPublishAsyncMaxPending(65536))
	if err != nil {
		q.Close()
		return nil, err
	}
	_, err = q.js.CreateOrUpdateStream(wctx, jetstream.StreamConfig{
		Name:              name,
		Subjects:          []string{q.schedPrefix + ">", q.target},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.WorkQueuePolicy,
		AllowMsgSchedules: true,
		Replicas:          1,
	})
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("target: nats stream: %w", err)
	}
	_, err = q.js.CreateOrUpdateConsumer(wctx, name, jetstream.ConsumerConfig{
		Durable: "workers", FilterSubject: q.target, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 100000,
	})
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("target: nats consumer: %w", err)
	}
	return q, nil
}

func (q *natsQueue) Publish(ctx context.Context, msgs []scenario.Message) error {
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		nm := nats.NewMsg(q.schedPrefix + strconv.FormatUint(m.Seq, 10))
		nm.Data = m.Payload
		// The server parses RFC 3339 with fractional seconds.
		nm.Header.Set(jetstream.ScheduleHeader, "@at "+m.Due.UTC().Format(time.RFC3339Nano))
		nm.Header.Set(jetstream.ScheduleTargetHeader, q.target)
		f, err := q.js.PublishMsgAsync(nm)
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (q *natsQueue) Consume(ctx context.Context, opts scenario.ConsumeOptions, handle func(scenario.Delivery)) error {
	cons, err := q.js.Consumer(ctx, q.stream, "workers")
	if err != nil {
		return err
	}
	var (
		mu       sync.Mutex // guards firstErr
		firstErr error
	)
	var ccs []jetstream.ConsumeContext
	for range max(1, opts.Workers) {
		cc, err := cons.Consume(func(m jetstream.Msg) {
			recv := time.Now()
			if err := m.Ack(); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			handle(scenario.Delivery{Payload: m.Data(), Received: recv})
		}, jetstream.PullMaxMessages(max(1, opts.Prefetch)))
		if err != nil {
			for _, c := range ccs {
				c.Stop()
			}
			return err
		}
		ccs = append(ccs, cc)
	}
	<-ctx.Done()
	for _, c := range ccs {
		c.Drain()
	}
	for _, c := range ccs {
		select {
		case <-c.Closed():
		case <-time.After(5 * time.Second):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// Restart stops nats-server and starts it again; it is ready when the
// stream answers its info request.
func (q *natsQueue) Restart(ctx context.Context) (time.Time, error) {
	return q.restart(ctx, func(ctx context.Context) error {
		return proc.WaitFor(ctx, 20*time.Millisecond, func(ctx context.Context) error {
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := q.js.Stream(ictx, q.stream)
			return err
		}, q.procs...)
	})
}

func (q *natsQueue) Close() error {
	if q.nc != nil {
		q.nc.Close()
	}
	return q.stop()
}
