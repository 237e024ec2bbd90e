package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
)

// Host is what the executor needs of the broker's host.
type Host interface {
	ReadMeta(ctx context.Context) (*meta.State, error)
	ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error)
	// MetaLeader is the node leading the meta group, 0 if unknown.
	MetaLeader() uint64
	// AddLearner, Promote and RemoveReplica change shard's membership and
	// are idempotent (a change already in is success). They keep retrying
	// temporary errors until ctx ends; any other error is a refusal.
	AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error
	Promote(ctx context.Context, shard, replica uint64, raftAddr string) error
	RemoveReplica(ctx context.Context, shard, replica uint64) error
	// TransferLeadership queues a move of shard's leadership to the
	// replica on toNode; it does not wait for the election.
	TransferLeadership(ctx context.Context, shard, toNode uint64) error
	// ShardLeader is the node leading shard, 0 if not known here.
	ShardLeader(shard uint64) uint64
}

// Config tunes the executor.
type Config struct {
	// MaxRunning caps the replica and leadership operations run at once,
	// and apart from them the admin operations (admin.go). Default 4.
	MaxRunning int
	// Poll is how often the executor looks at the meta state. Default 500ms.
	Poll time.Duration
	// Shards is what the executor's Shards knows of the first shards; its
	// Poll defaults to Poll.
	Shards ShardsConfig
}

// runner is one running operation's goroutine.
type runner struct {
	cancel context.CancelFunc
	// step ends the running step's context (a cancel asked for the
	// operation); set by the runner's goroutine, guarded by Executor.mu.
	step context.CancelFunc
}

// Executor runs the persisted operations while this node leads meta.
type Executor struct {
	host  Host
	peers *peer.Conns // admin steps call shard leaders over them
	self  uint64
	cfg   Config
	log   *zap.Logger
	m     *metrics

	mu      sync.Mutex
	running map[meta.OperationID]*runner

	adminOps adminRuns // admin.go
	shards   *Shards   // shards.go

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns an executor for node self; Start runs it.
func New(h Host, peers *peer.Conns, self uint64, cfg Config, log *zap.Logger, reg prometheus.Registerer) *Executor {
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 4
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Shards.Poll <= 0 {
		cfg.Shards.Poll = cfg.Poll
	}
	return &Executor{host: h, peers: peers, self: self, cfg: cfg, log: log.Named("operator"), m: newMetrics(reg),
		running: map[meta.OperationID]*runner{}, shards: NewShards(h, self, cfg.Shards, log, reg)}
}

// Start runs the executor's loop until Stop.
func (e *Executor) Start(ctx context.Context) {
	ctx, e.cancel = context.WithCancel(ctx)
	e.wg.Add(2)
	go e.loop(ctx)
	go e.adminLoop(ctx)
	e.shards.Start(ctx)
}

// Stop ends the loop and every running operation and waits for them; the
// operations stay persisted at their step.
func (e *Executor) Stop() {
	if e.cancel != nil {
		e.cancel()
	}
	e.shards.Stop()
	e.wg.Wait()
}

func (e *Executor) loop(ctx context.Context) {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.Poll)
	defer t.Stop()
	for {
		e.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick starts unfinished operations while this node leads meta, and
// cancels the running ones when it no longer does.
func (e *Executor) tick(ctx context.Context) {
	if e.host.MetaLeader() != e.self {
		e.mu.Lock()
		for id, r := range e.running {
			r.cancel()
			delete(e.running, id)
		}
		e.mu.Unlock()
		return
	}
	st, err := e.host.ReadMeta(ctx)
	if err != nil {
		return
	}
	e.m.count(st)
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, r := range e.running {
		if op := st.Operations[id]; op != nil && op.Cancel != "" && r.step != nil {
			r.step() // the runner sees the cancel and rolls back
		}
	}
	for _, op := range st.UnfinishedMoves() { // admin operations: adminLoop
		if len(e.running) >= e.cfg.MaxRunning {
			return
		}
		if _, ok := e.running[op.ID]; ok {
			continue
		}
		octx, cancel := context.WithCancel(ctx)
		r := &runner{cancel: cancel}
		e.running[op.ID] = r
		e.wg.Add(1)
		go func(id meta.OperationID) {
			defer e.wg.Done()
			e.run(octx, r, id)
			e.mu.Lock()
			if e.running[id] == r { // not a runner started after a lost and regained leadership
				delete(e.running, id)
			}
			e.mu.Unlock()
			cancel()
		}(op.ID)
	}
}

// run drives operation id, run by r, until it ends or ctx does.
func (e *Executor) run(ctx context.Context, r *runner, id meta.OperationID) {
	for ctx.Err() == nil {
		st, err := e.host.ReadMeta(ctx)
		if err != nil {
			sleep(ctx, e.cfg.Poll)
			continue
		}
		op := st.Operations[id]
		if op == nil || op.Finished() {
			if op != nil && op.Status == meta.OperationDone && op.StartedAtMs > 0 {
				e.m.moveSeconds.WithLabelValues(string(op.Kind)).Observe(float64(op.FinishedAtMs-op.StartedAtMs) / 1000)
			}
			return
		}
		log := e.log.With(zap.Uint64("shard_id", uint64(op.Shard)), zap.Uint64("operation_id", uint64(op.ID)))
		if op.Status == meta.OperationPending {
			log.Info("operation started", zap.Stringer("operation", op))
			e.propose(ctx, &meta.Command{Op: meta.OpStartOperation, OperationID: id})
			continue
		}
		if op.Cancel != "" {
			e.cancelled(ctx, st, op)
			continue
		}
		step := op.Steps[op.Current]
		sctx, cancel := context.WithTimeout(ctx, time.Duration(step.TimeoutMs)*time.Millisecond)
		e.mu.Lock()
		r.step = cancel
		e.mu.Unlock()
		err = e.step(sctx, st, op, step)
		timedOut, interrupted := errors.Is(sctx.Err(), context.DeadlineExceeded), errors.Is(sctx.Err(), context.Canceled)
		e.mu.Lock()
		r.step = nil
		e.mu.Unlock()
		cancel()
		if ctx.Err() != nil {
			return // no longer leading meta (or stopping): the next leader resumes
		}
		if err == nil {
			log.Info("operation step done", zap.String("step", string(step.Kind)), zap.Int("index", op.Current))
			continue
		}
		if timedOut {
			e.m.timeouts.WithLabelValues(string(step.Kind)).Inc()
		}
		log.Warn("operation step failed", zap.String("step", string(step.Kind)), zap.String("rollback", string(step.Rollback)), zap.Bool("timed_out", timedOut), zap.Error(err))
		switch {
		case interrupted:
			// Ended by a cancel: the next round reads it and rolls back.
		case step.Kind == meta.StepDeleteData:
			// Whatever rollback older operations persisted for it: the
			// replica is out of the membership and the placement, so
			// only the node's own garbage is left (see ends.go).
			if err := e.skip(ctx, op, fmt.Sprintf("skipped: node %d did not report within %s; %s", step.Node,
				time.Duration(step.TimeoutMs)*time.Millisecond, cleanUp)); err != nil {
				log.Debug("operation step skip not committed yet", zap.Error(err))
				sleep(ctx, e.cfg.Poll)
			}
		case step.Rollback == meta.RollbackRetry:
			// Recorded, so the operation shows why it has not moved on.
			if why := fmt.Sprintf("%s: attempt failed, retrying: %v", step.Kind, err); why != op.Error {
				e.propose(ctx, &meta.Command{Op: meta.OpNoteStep, OperationID: id, Step: op.Current, Error: why})
			}
			sleep(ctx, e.cfg.Poll)
		case step.Rollback == meta.RollbackRemoveNew:
			if err := e.rollBack(ctx, st, op, err); err != nil {
				log.Warn("operation roll back not done yet", zap.Error(err))
				sleep(ctx, e.cfg.Poll)
			}
		default:
			e.propose(ctx, &meta.Command{Op: meta.OpFinishOperation, OperationID: id, Status: meta.OperationFailed,
				Error: fmt.Sprintf("%s: %v", step.Kind, err)})
		}
	}
}

// step runs one step and records it done in the meta state.
func (e *Executor) step(ctx context.Context, st *meta.State, op *meta.Operation, step meta.Step) error {
	shard := uint64(op.Shard)
	if gone := nodeGone(st, step.Node); gone != "" {
		switch step.Kind {
		case meta.StepAddLearner, meta.StepWaitCatchUp, meta.StepPromote, meta.StepTransferLeader:
			return fmt.Errorf("%w: node %d is %s", errNodeGone, step.Node, gone)
		case meta.StepDeleteData:
			return e.skip(ctx, op, fmt.Sprintf("skipped: node %d %s; %s", step.Node, gone, cleanUp))
		}
	}
	switch step.Kind {
	case meta.StepAddLearner:
		n := st.Nodes[step.Node]
		if n == nil {
			return fmt.Errorf("node %d is not registered", step.Node)
		}
		if err := e.host.AddLearner(ctx, shard, uint64(op.NewReplica), n.RaftAddr); err != nil {
			return err
		}
	case meta.StepPromote:
		n := st.Nodes[step.Node]
		if n == nil {
			return fmt.Errorf("node %d is not registered", step.Node)
		}
		if err := e.host.Promote(ctx, shard, uint64(op.NewReplica), n.RaftAddr); err != nil {
			return err
		}
	case meta.StepTransferLeader:
		if err := e.transfer(ctx, op, step); err != nil {
			return err
		}
	case meta.StepRemoveReplica:
		if r, ok := st.Shards[op.Shard].ReplicaOn(step.Node); ok {
			if err := e.host.RemoveReplica(ctx, shard, uint64(r.ID)); err != nil {
				return err
			}
		}
	case meta.StepWaitCatchUp, meta.StepDeleteData:
		return e.waitPast(ctx, op.ID, op.Current)
	case meta.StepRegisterGroup, meta.StepForgetGroup, meta.StepForgetTopic:
		return e.adminStep(ctx, st, op, step)
	}
	return e.advance(ctx, op.ID, op.Current)
}

// transfer moves the shard's leadership to step.Node when the node the
// operation removes leads it (or, for a transfer-leader operation, always)
// and waits until it leads.
func (e *Executor) transfer(ctx context.Context, op *meta.Operation, step meta.Step) error {
	shard := uint64(op.Shard)
	for {
		leader := e.host.ShardLeader(shard)
		if leader == uint64(step.Node) || (op.Kind != meta.OpKindTransferLeader && leader != 0 && leader != uint64(op.From)) {
			return nil
		}
		if leader != 0 {
			if err := e.host.TransferLeadership(ctx, shard, uint64(step.Node)); err != nil {
				return err
			}
		}
		if !sleep(ctx, e.cfg.Poll) {
			return fmt.Errorf("shard %d still led by node %d: %w", shard, leader, ctx.Err())
		}
	}
}

// waitPast waits until operation id's current step is past index (another
// node completed it) or ctx ends.
func (e *Executor) waitPast(ctx context.Context, id meta.OperationID, index int) error {
	for {
		st, err := e.host.ReadMeta(ctx)
		if err == nil {
			op := st.Operations[id]
			if op == nil || op.Finished() || op.Current > index {
				return nil
			}
		}
		if !sleep(ctx, e.cfg.Poll) {
			return fmt.Errorf("waiting for the node to report: %w", ctx.Err())
		}
	}
}

// rollBack removes the replica the operation added from the membership
// and ends the operation rolled back.
func (e *Executor) rollBack(ctx context.Context, st *meta.State, op *meta.Operation, cause error) error {
	// Removing a replica that was never added (the add-learner step failed
	// before its change committed) is success: RemoveReplica is idempotent.
	if op.NewReplica != 0 {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := e.host.RemoveReplica(rctx, uint64(op.Shard), uint64(op.NewReplica))
		cancel()
		if err != nil {
			return fmt.Errorf("remove replica %d: %w", op.NewReplica, err)
		}
	}
	e.log.Warn("operation rolled back", zap.Uint64("shard_id", uint64(op.Shard)), zap.Uint64("operation_id", uint64(op.ID)), zap.Error(cause))
	return e.finish(ctx, op.ID, meta.OperationRolledBack, fmt.Sprintf("%s: %v", op.Steps[op.Current].Kind, cause))
}

func (e *Executor) advance(ctx context.Context, id meta.OperationID, index int) error {
	_, _, err := e.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpAdvanceOperation, OperationID: id, Step: index})
	return err
}

func (e *Executor) finish(ctx context.Context, id meta.OperationID, status meta.OperationStatus, why string) error {
	_, _, err := e.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpFinishOperation, OperationID: id, Status: status, Error: why})
	return err
}

func (e *Executor) propose(ctx context.Context, c *meta.Command) {
	if _, _, err := e.host.ProposeMeta(ctx, c); err != nil {
		e.log.Debug("operation proposal not committed yet", zap.String("op", string(c.Op)), zap.Error(err))
		sleep(ctx, e.cfg.Poll)
	}
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
