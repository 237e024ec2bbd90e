// Package proposer group-commits commands to one Raft shard. Callers hand in
// single commands; a few workers each take whatever is queued (up to a cap),
// propose it as one Raft entry and hand every caller its own outcome. While
// one proposal waits for its commit the next batch gathers, so batches grow
// with load without a linger delay at low load.
//
// Goroutines: the workers, started by New and stopped by Close; Propose is
// safe from any goroutine.
package proposer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// ErrClosed is returned by Propose after Close.
var ErrClosed = errors.New("proposer: closed")

// ErrMalformed is returned if the state machine could not decode an entry.
var ErrMalformed = errors.New("proposer: entry rejected as malformed")

// Config tunes batching.
type Config struct {
	// Workers is the number of proposals in flight at once. Default 4.
	Workers int
	// MaxBatchCommands caps the commands in one entry. Default 512.
	MaxBatchCommands int
	// MaxBatchBytes caps the encoded size of one entry. Default 4 MiB.
	MaxBatchBytes int
	// ProposeTimeout bounds one proposal. Default 5s.
	ProposeTimeout time.Duration
}

func (c *Config) fill() {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.MaxBatchCommands <= 0 {
		c.MaxBatchCommands = 512
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.ProposeTimeout <= 0 {
		c.ProposeTimeout = 5 * time.Second
	}
}

type request struct {
	ctx  context.Context
	cmd  *fsmpb.Command
	size int
	done chan result
}

type result struct {
	out *fsmpb.Outcome
	err error
}

// Proposer batches the commands of one shard.
type Proposer struct {
	shard   uint64
	nh      *dragonboat.NodeHost
	cfg     Config
	log     *zap.Logger
	metrics *Metrics

	queue  chan *request
	stopc  chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

// New starts the workers of shard on nh. A batch serves many callers, so
// its proposal is bounded by ProposeTimeout alone: it keeps ctx's values
// but not its cancellation, and the workers run until Close.
func New(ctx context.Context, nh *dragonboat.NodeHost, shard uint64, cfg Config, log *zap.Logger, m *Metrics) *Proposer {
	cfg.fill()
	p := &Proposer{
		shard: shard, nh: nh, cfg: cfg, log: log, metrics: m,
		queue: make(chan *request, cfg.MaxBatchCommands*cfg.Workers),
		stopc: make(chan struct{}),
	}
	ctx = context.WithoutCancel(ctx)
	for range cfg.Workers {
		p.wg.Add(1)
		go p.work(ctx)
	}
	return p
}

// Close stops the workers; queued and later calls fail with ErrClosed.
func (p *Proposer) Close() {
	p.closed.Do(func() { close(p.stopc) })
	p.wg.Wait()
}

// Propose commits cmd and returns its outcome.
func (p *Proposer) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Outcome, error) {
	req := &request{ctx: ctx, cmd: cmd, size: proto.Size(cmd), done: make(chan result, 1)}
	select {
	case p.queue <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.stopc:
		return nil, ErrClosed
	}
	select {
	case r := <-req.done:
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Proposer) work(ctx context.Context) {
	defer p.wg.Done()
	batch := make([]*request, 0, p.cfg.MaxBatchCommands)
	for {
		batch = batch[:0]
		select {
		case <-p.stopc:
			p.drain()
			return
		case req := <-p.queue:
			batch = append(batch, req)
		}
		size := batch[0].size
	gather:
		for len(batch) < p.cfg.MaxBatchCommands && size < p.cfg.MaxBatchBytes {
			select {
			case req := <-p.queue:
				batch = append(batch, req)
				size += req.size
			default:
				break gather
			}
		}
		p.propose(ctx, batch)
	}
}

func (p *Proposer) drain() {
	for {
		select {
		case req := <-p.queue:
			req.done <- result{err: ErrClosed}
		default:
			return
		}
	}
}

func (p *Proposer) propose(ctx context.Context, batch []*request) {
	live := batch[:0]
	for _, req := range batch {
		if req.ctx.Err() != nil {
			req.done <- result{err: req.ctx.Err()}
			continue
		}
		live = append(live, req)
	}
	if len(live) == 0 {
		return
	}
	entry := &fsmpb.Batch{Commands: make([]*fsmpb.Command, len(live))}
	for i, req := range live {
		entry.Commands[i] = req.cmd
	}
	data, err := proto.Marshal(entry)
	if err != nil {
		p.fail(live, fmt.Errorf("proposer: encode batch: %w", err))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProposeTimeout)
	defer cancel()
	start := time.Now()
	res, err := p.nh.SyncPropose(ctx, p.nh.GetNoOPSession(p.shard), data)
	p.metrics.observe(time.Since(start), len(live), err)
	outs, err := outcomes(res, err, len(live))
	if err != nil {
		p.fail(live, err)
		return
	}
	for i, req := range live {
		req.done <- result{out: outs[i]}
	}
}

// outcomes decodes the result of an entry of n commands.
func outcomes(res sm.Result, err error, n int) ([]*fsmpb.Outcome, error) {
	if err != nil {
		return nil, err
	}
	if res.Value != fsm.ResultApplied {
		return nil, ErrMalformed
	}
	var outs fsmpb.Outcomes
	if err := proto.Unmarshal(res.Data, &outs); err != nil {
		return nil, fmt.Errorf("proposer: outcome of %d commands: %w", n, err)
	}
	if len(outs.Outcomes) != n {
		return nil, fmt.Errorf("proposer: %d outcomes for %d commands proposed", len(outs.Outcomes), n)
	}
	return outs.Outcomes, nil
}

// Start proposes cmd as an entry of its own right away, bypassing the
// group-commit queue, and returns a function that waits for its outcome.
// Anything proposed on the shard after Start returns is ordered after cmd
// in the Raft log (as long as the leader does not change).
func (p *Proposer) Start(ctx context.Context, cmd *fsmpb.Command) (func() (*fsmpb.Outcome, error), error) {
	data, err := proto.Marshal(&fsmpb.Batch{Commands: []*fsmpb.Command{cmd}})
	if err != nil {
		return nil, fmt.Errorf("proposer: encode command: %w", err)
	}
	timeout := p.cfg.ProposeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	start := time.Now()
	rs, err := p.nh.Propose(p.nh.GetNoOPSession(p.shard), data, timeout)
	if err != nil {
		p.metrics.observe(0, 1, err)
		return nil, err
	}
	return func() (*fsmpb.Outcome, error) {
		defer rs.Release()
		var res sm.Result
		var err error
		select {
		case r := <-rs.ResultC():
			res, err = requestResult(r)
		case <-ctx.Done():
			err = ctx.Err()
		}
		p.metrics.observe(time.Since(start), 1, err)
		outs, err := outcomes(res, err, 1)
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}, nil
}

// requestResult maps an asynchronous proposal's result to Dragonboat's
// errors, as SyncPropose does.
func requestResult(r dragonboat.RequestResult) (sm.Result, error) {
	switch {
	case r.Completed():
		return r.GetResult(), nil
	case r.Timeout():
		return sm.Result{}, dragonboat.ErrTimeout
	case r.Terminated():
		return sm.Result{}, dragonboat.ErrShardClosed
	case r.Dropped():
		return sm.Result{}, dragonboat.ErrShardNotReady
	case r.Rejected():
		return sm.Result{}, dragonboat.ErrRejected
	case r.Aborted():
		return sm.Result{}, dragonboat.ErrAborted
	}
	return sm.Result{}, dragonboat.ErrCanceled
}

func (p *Proposer) fail(batch []*request, err error) {
	for _, req := range batch {
		req.done <- result{err: err}
	}
}
