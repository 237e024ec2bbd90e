package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The backup targets: after a full backup of a large backlog, an
// incremental one after a few changes costs at most these fractions of
// the full one's bytes and wall time.
const (
	BackupBytesTarget = 0.05
	BackupTimeTarget  = 0.10
)

// BackupConfig configures Backup.
type BackupConfig struct {
	Load Load `json:"load"`
	// Messages pending at the full backup, due Delay after publish; default
	// 1,000,000.
	Messages uint64 `json:"messages"`
	// Changes is how many messages due at once are published before the
	// full backup (and received and acked after it), and how many more,
	// due in Delay, are published after it: the change the incremental
	// backup holds. Default 10,000.
	Changes uint64 `json:"changes"`
	// MaxFill bounds the fill of Messages; a slow system holds fewer (the
	// result says how many); default 10m.
	MaxFill time.Duration `json:"max_fill_ns"`
	Delay   time.Duration `json:"delay_ns"` // default 1h
	// Dest is the destination the backups are written to, a URL the
	// system's servers can reach (file:///absolute/dir); required.
	Dest string `json:"dest"`
	// NoRestore skips the restore of the incremental backup into a new,
	// empty system of the same shape.
	NoRestore bool `json:"no_restore"`
	// ConsumeTimeout bounds receiving and acking the due messages, and the
	// wait for the restored system's pending count; default 2m.
	ConsumeTimeout time.Duration `json:"consume_timeout_ns"`
}

func (c BackupConfig) withDefaults() BackupConfig {
	c.Load = c.Load.withDefaults()
	if c.Messages == 0 {
		c.Messages = 1_000_000
	}
	if c.Changes == 0 {
		c.Changes = 10_000
	}
	if c.MaxFill <= 0 {
		c.MaxFill = 10 * time.Minute
	}
	if c.Delay <= 0 {
		c.Delay = time.Hour
	}
	if c.ConsumeTimeout <= 0 {
		c.ConsumeTimeout = 2 * time.Minute
	}
	return c
}

// Backupper is a System that backs itself up and restores its backups
// (Sundial's Backups service).
type Backupper interface {
	// Backup takes a full or an incremental backup to dest and returns
	// once it has finished; a backup that failed is an error.
	Backup(ctx context.Context, dest string, incremental bool) (BackupTaken, error)
	// Pending counts the messages the queue holds for its consumers: not
	// yet acked, due or not.
	Pending(ctx context.Context) (int64, error)
	// NewEmpty starts a new, empty system of the same shape (nodes,
	// shards) to restore into.
	NewEmpty(ctx context.Context) (RestoreTarget, error)
}

// RestoreTarget is a new system a backup is restored into.
type RestoreTarget interface {
	// Restore restores backup id (and the backups it builds on) from src
	// and returns the messages the restore reports.
	Restore(ctx context.Context, src, id string) (messages int64, err error)
	// Pending is Backupper.Pending.
	Pending(ctx context.Context) (int64, error)
	// Close stops the system.
	Close() error
}

// BackupTaken is one backup as the system reports it, and the wall time of
// the call that took it.
type BackupTaken struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Bytes written to the destination, Messages captured.
	Bytes    int64 `json:"bytes"`
	Messages int64 `json:"messages"`
	// Elapsed is the wall time of the call that started the backup and
	// waited for it, measured by the client; RunTime the system's own
	// account from the run's start to its end.
	Elapsed time.Duration `json:"elapsed_ns"`
	RunTime time.Duration `json:"run_time_ns"`
}

// BackupJudgement is an incremental backup against the full one it builds
// on: its bytes and its wall time as fractions of the full one's, and
// whether each is within its target.
type BackupJudgement struct {
	BytesRatio float64 `json:"bytes_ratio"`
	TimeRatio  float64 `json:"time_ratio"`
	BytesMet   bool    `json:"bytes_target_met"`
	TimeMet    bool    `json:"time_target_met"`
}

// JudgeBackup compares incr with full against BackupBytesTarget and
// BackupTimeTarget. A full backup without bytes or time gives no ratio,
// and no target is met on it.
func JudgeBackup(full, incr BackupTaken) BackupJudgement {
	var j BackupJudgement
	if full.Bytes > 0 {
		j.BytesRatio = float64(incr.Bytes) / float64(full.Bytes)
		j.BytesMet = j.BytesRatio <= BackupBytesTarget
	}
	if full.Elapsed > 0 {
		j.TimeRatio = float64(incr.Elapsed) / float64(full.Elapsed)
		j.TimeMet = j.TimeRatio <= BackupTimeTarget
	}
	return j
}

// RestoreResult is the restore of the incremental backup into a new
// system.
type RestoreResult struct {
	// Elapsed is the wall time of the restore call (the new system's start
	// is not in it).
	Elapsed time.Duration `json:"elapsed_ns"`
	// Messages is what the restore reports it wrote.
	Messages int64 `json:"messages"`
	// SourcePending is the backed-up system's pending count when the
	// incremental backup was taken, RestoredPending the new system's after
	// the restore (polled until equal, up to ConsumeTimeout).
	SourcePending   int64 `json:"source_pending"`
	RestoredPending int64 `json:"restored_pending"`
	Match           bool  `json:"pending_match"`
}

// BackupResult is what Backup measured.
type BackupResult struct {
	Config BackupConfig `json:"config"`
	// Published counts the messages of the fill (due in Delay) and Due
	// the ones due at once, published before the full backup; Failed the
	// ones of either whose publish failed.
	Published  uint64  `json:"published"`
	Due        uint64  `json:"due"`
	Failed     uint64  `json:"publish_failed"`
	FillRate   float64 `json:"fill_msgs_per_second"`
	FirstError string  `json:"first_error,omitempty"`
	// ChangesPublished and ChangesAcked are the messages published and the
	// due ones acked between the two backups.
	ChangesPublished uint64          `json:"changes_published"`
	ChangesAcked     uint64          `json:"changes_acked"`
	Full             BackupTaken     `json:"full"`
	Incremental      BackupTaken     `json:"incremental"`
	Judgement        BackupJudgement `json:"judgement"`
	// Restore is nil when it was not run (NoRestore, or the scenario
	// stopped before it).
	Restore      *RestoreResult `json:"restore,omitempty"`
	ConsumeError string         `json:"consume_error,omitempty"`
}

// Backup fills Messages messages due in Delay and Changes due at once,
// takes a full backup to Dest, publishes Changes more (due in Delay),
// receives and acks the due ones, and takes an incremental backup: the
// bytes and wall time of each, and their ratios against the targets. Then,
// unless NoRestore, it restores the incremental backup into a new system
// of the same shape, timed, and checks that it holds as many pending
// messages as the backed-up system did.
func Backup(ctx context.Context, s System, cfg BackupConfig) (BackupResult, error) {
	cfg = cfg.withDefaults()
	res := BackupResult{Config: cfg}
	b, ok := s.(Backupper)
	switch {
	case !ok:
		return res, errors.New("scenario: backup: the system has no backups")
	case cfg.Dest == "":
		return res, errors.New("scenario: backup: no destination")
	}
	// Seqs: [0, Changes) due at once, then the fill, then the changes
	// published between the backups.
	due, fillFrom, changesFrom := uint64(0), cfg.Changes, cfg.Changes+cfg.Messages
	rec := newReceiver(changesFrom + cfg.Changes)
	now := dueMs(time.Now())
	df := fill(ctx, s, cfg.Load, due, cfg.Changes, time.Now().Add(cfg.MaxFill), func(uint64) time.Time { return now })
	f := fill(ctx, s, cfg.Load, fillFrom, cfg.Messages, time.Now().Add(cfg.MaxFill),
		func(uint64) time.Time { return time.Now().Add(cfg.Delay) })
	res.Published, res.Due, res.Failed = f.published, df.published, df.failed+f.failed
	res.FirstError = errString(errors.Join(df.firstErr, f.firstErr))
	res.FillRate = rate(f.published, f.elapsed)
	if f.published == 0 || df.published == 0 {
		return res, fmt.Errorf("scenario: backup: fill: %w", errors.Join(df.cause(ctx), f.cause(ctx)))
	}

	var err error
	if res.Full, err = timedBackup(ctx, b, cfg.Dest, false); err != nil {
		return res, fmt.Errorf("scenario: backup: full: %w", err)
	}

	cf := fill(ctx, s, cfg.Load, changesFrom, cfg.Changes, time.Now().Add(cfg.MaxFill),
		func(uint64) time.Time { return time.Now().Add(cfg.Delay) })
	res.ChangesPublished = cf.published
	if cf.published == 0 {
		return res, fmt.Errorf("scenario: backup: changes: %w", cf.cause(ctx))
	}
	rec.expect(df.published)
	stop := startConsumer(ctx, s, cfg.Load.consume(), rec.handle)
	rec.wait(ctx, time.Now().Add(cfg.ConsumeTimeout))
	res.ConsumeError = errString(stop())
	rec.mu.Lock()
	res.ChangesAcked = rec.got
	rec.mu.Unlock()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	source, err := b.Pending(ctx)
	if err != nil {
		return res, fmt.Errorf("scenario: backup: pending: %w", err)
	}

	if res.Incremental, err = timedBackup(ctx, b, cfg.Dest, true); err != nil {
		return res, fmt.Errorf("scenario: backup: incremental: %w", err)
	}
	res.Judgement = JudgeBackup(res.Full, res.Incremental)

	var errs []error
	if res.ChangesAcked < df.published {
		errs = append(errs, fmt.Errorf("scenario: backup: %d of %d due messages acked within %v", res.ChangesAcked, df.published, cfg.ConsumeTimeout))
	}
	if !cfg.NoRestore {
		r, err := restore(ctx, b, cfg, res.Incremental.ID, source)
		res.Restore = &r
		if err != nil {
			errs = append(errs, fmt.Errorf("scenario: backup: restore: %w", err))
		} else if !r.Match {
			errs = append(errs, fmt.Errorf("scenario: backup: restored %d pending messages, the backed-up system had %d", r.RestoredPending, r.SourcePending))
		}
	}
	return res, errors.Join(errs...)
}

// timedBackup takes a backup and times the call.
func timedBackup(ctx context.Context, b Backupper, dest string, incremental bool) (BackupTaken, error) {
	start := time.Now()
	t, err := b.Backup(ctx, dest, incremental)
	t.Elapsed = time.Since(start)
	return t, err
}

// restore restores backup id from cfg.Dest into a new system, timed, and
// polls its pending count until it equals source or ConsumeTimeout passes.
func restore(ctx context.Context, b Backupper, cfg BackupConfig, id string, source int64) (res RestoreResult, err error) {
	res.SourcePending = source
	t, err := b.NewEmpty(ctx)
	if err != nil {
		return res, fmt.Errorf("new system: %w", err)
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	start := time.Now()
	res.Messages, err = t.Restore(ctx, cfg.Dest, id)
	res.Elapsed = time.Since(start)
	if err != nil {
		return res, err
	}
	deadline := time.Now().Add(cfg.ConsumeTimeout)
	for {
		res.RestoredPending, err = t.Pending(ctx)
		res.Match = err == nil && res.RestoredPending == source
		if res.Match || time.Now().After(deadline) || ctx.Err() != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
