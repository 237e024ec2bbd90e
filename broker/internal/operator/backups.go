package operator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/broker/internal/backup"
	"github.com/sundialmq/sundial/broker/internal/backup/format"
	"github.com/sundialmq/sundial/broker/internal/backup/store"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Backups carries out the backup runs persisted in the meta state
// (meta/backup.go) while this node leads the meta group: it writes the
// catalog file, has each shard captured by its leader (Peer.CaptureShard),
// recording each capture as it completes, writes the manifest last, trims
// the shards' change journals to the indexes captured, and ends the run.
// A new meta leader resumes a run with the shards not yet recorded (their
// files are written again, under the same names). A step that fails is
// tried again with backoff, its error noted in the run; after
// backupStepTries failures the run ends failed, without a manifest.
//
// One goroutine (loop) watches leadership and the state; one more drives
// the running run while this node leads. Both are started by Start and
// joined by Stop.
type Backups struct {
	host    Host
	peers   *peer.Conns
	stores  *backup.Stores
	metrics *backup.Metrics
	self    uint64
	poll    time.Duration
	log     *zap.Logger
	now     func() time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	driving string             // id of the run being driven; guarded by mu
	stop    context.CancelFunc // ends the drive; guarded by mu
}

// Tuning of a run's steps.
const (
	// backupStepTries is how many times a step (the catalog, a shard's
	// capture, the manifest) is tried before the run fails.
	backupStepTries = 6
	// backupCaptureTimeout bounds one capture call: a large shard's
	// capture and upload take minutes, a paused broker must not hold the
	// run forever.
	backupCaptureTimeout = 15 * time.Minute
	backupBackoff        = time.Second
	backupBackoffMax     = 30 * time.Second
)

// NewBackups returns the backup runner of node self.
func NewBackups(h Host, peers *peer.Conns, stores *backup.Stores, m *backup.Metrics, self uint64, poll time.Duration, log *zap.Logger) *Backups {
	if poll <= 0 {
		poll = time.Second
	}
	return &Backups{host: h, peers: peers, stores: stores, metrics: m, self: self, poll: poll, log: log.Named("backups"), now: time.Now}
}

// Start starts the loop.
func (b *Backups) Start(ctx context.Context) {
	ctx, b.cancel = context.WithCancel(ctx)
	b.wg.Add(1)
	go b.loop(ctx)
}

// Stop ends the loop and the drive of a run and waits for them; the run
// stays persisted as far as it got.
func (b *Backups) Stop() {
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
}

func (b *Backups) loop(ctx context.Context) {
	defer b.wg.Done()
	t := time.NewTicker(b.poll)
	defer t.Stop()
	for {
		b.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick starts driving the running run on the meta leader, and stops the
// drive elsewhere.
func (b *Backups) tick(ctx context.Context) {
	if b.host.MetaLeader() != b.self {
		b.mu.Lock()
		if b.stop != nil {
			b.stop()
		}
		b.mu.Unlock()
		return
	}
	st, err := b.host.ReadMeta(ctx)
	if err != nil {
		return
	}
	b.lastSuccess(st)
	run := st.RunningBackup()
	if run == nil {
		b.schedule(ctx, st)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.driving != "" {
		return
	}
	dctx, cancel := context.WithCancel(ctx)
	b.driving, b.stop = run.ID, cancel
	b.wg.Add(1)
	go func(id string) {
		defer b.wg.Done()
		defer cancel()
		b.drive(dctx, id)
		b.mu.Lock()
		b.driving, b.stop = "", nil
		b.mu.Unlock()
	}(run.ID)
}

// lastSuccess sets the last-success gauges from the newest done run of
// each destination the state keeps.
func (b *Backups) lastSuccess(st *meta.State) {
	for _, r := range st.Backups {
		if r.Status == meta.BackupDone {
			var bytes int64
			if r.Catalog != nil {
				bytes = r.Catalog.Bytes
			}
			for _, c := range r.Captures {
				bytes += c.Bytes
			}
			b.metrics.LastSuccess(r.Dest, time.UnixMilli(r.FinishedAtMs), time.Duration(r.FinishedAtMs-r.StartedAtMs)*time.Millisecond, bytes)
		}
	}
}

// errRunGone ends a drive whose run is no longer running (failed by
// another leader, or unknown).
var errRunGone = errors.New("operator: the backup run is no longer running")

// drive carries run id out from where its persisted state is.
func (b *Backups) drive(ctx context.Context, id string) {
	err := b.carryOut(ctx, id)
	switch {
	case err == nil, errors.Is(err, errRunGone):
		return
	case ctx.Err() != nil:
		b.log.Info("backup run handed over", zap.String("backup_id", id), zap.Error(err))
		return
	}
	b.log.Warn("backup run failed", zap.String("backup_id", id), zap.Error(err))
	if _, _, perr := b.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpFinishBackup, NowMs: b.now().UnixMilli(), Name: id, Error: err.Error()}); perr == nil {
		b.metrics.RunEnded(b.kindOf(ctx, id), false)
	}
}

func (b *Backups) kindOf(ctx context.Context, id string) string {
	if st, err := b.host.ReadMeta(ctx); err == nil {
		if r := st.BackupRun(id); r != nil {
			return r.Kind
		}
	}
	return meta.BackupFull
}

func (b *Backups) carryOut(ctx context.Context, id string) error {
	st, run, err := b.run(ctx, id)
	if err != nil {
		return err
	}
	dest, err := b.stores.Open(run.Dest)
	if err != nil {
		return err
	}
	b.log.Info("backup run driven", zap.String("backup_id", id), zap.String("kind", run.Kind), zap.String("dest", dest.String()),
		zap.Int("shards", len(run.Shards)), zap.Int("captured", len(run.Captures)))
	if run.Catalog == nil {
		if err := b.step(ctx, id, "catalog", func() error {
			f, err := backup.WriteCatalog(ctx, dest, id, st.Catalog(), b.now().UnixMilli())
			if err != nil {
				return err
			}
			return b.record(ctx, &meta.Command{Op: meta.OpRecordBackup, Name: id, BackupFile: &f})
		}); err != nil {
			return err
		}
	}
	since := map[uint64]uint64{}
	if run.Parent != "" {
		if err := b.step(ctx, id, "parent manifest", func() error {
			m, err := format.ReadManifest(ctx, dest, run.Parent)
			if errors.Is(err, store.ErrNotFound) {
				return permanent(fmt.Errorf("the parent backup %s has no manifest in %s", run.Parent, dest))
			}
			if err != nil {
				return err
			}
			for _, s := range m.Shards {
				since[s.Shard] = s.Index
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, shard := range run.Shards {
		if run.Captures[shard] != nil {
			continue
		}
		if err := b.step(ctx, id, fmt.Sprintf("shard %d", shard), func() error {
			return b.capture(ctx, st, run, uint64(shard), since[uint64(shard)])
		}); err != nil {
			return err
		}
	}
	if _, run, err = b.run(ctx, id); err != nil {
		return err
	}
	m, err := backup.Manifest(run, st.ClusterID, b.now().UnixMilli())
	if err != nil {
		return err
	}
	if err := b.step(ctx, id, "manifest", func() error { return backup.WriteManifest(ctx, dest, m) }); err != nil {
		return err
	}
	// The backup exists: each shard's journal can forget what it holds.
	// A trim that fails costs the next incremental only a longer read.
	for _, shard := range run.Shards {
		c := run.Captures[shard]
		err := OnShardLeader(ctx, b.host, b.peers, b.log, st, uint64(shard), adminCallTimeout, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := brokerv1.NewPeerClient(conn).TrimJournal(ctx, &brokerv1.TrimJournalRequest{ShardId: uint64(shard), Through: c.Index})
			return err
		})
		if err != nil {
			b.log.Warn("journal not trimmed after a backup", zap.String("backup_id", id), zap.Uint64("shard_id", uint64(shard)), zap.Error(err))
		}
	}
	if _, _, err := b.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpFinishBackup, NowMs: b.now().UnixMilli(), Name: id}); err != nil {
		return err
	}
	b.metrics.RunEnded(run.Kind, true)
	b.log.Info("backup done", zap.String("backup_id", id), zap.String("kind", run.Kind), zap.Int64("bytes", m.Bytes), zap.Int64("messages", m.Messages))
	if sc := st.BackupSchedule; run.Scheduled && sc != nil && sc.Dest == run.Dest && sc.KeepMs > 0 {
		b.prune(ctx, dest, time.Duration(sc.KeepMs)*time.Millisecond)
	}
	return nil
}

// schedule starts the scheduled run that is due, if any: full when the
// schedule says so or dest holds no complete backup of this cluster to
// build on, else incremental on the newest. A destination that cannot be
// read still gets its run, full, which then fails and says why.
func (b *Backups) schedule(ctx context.Context, st *meta.State) {
	sc := st.BackupSchedule
	now := b.now()
	if sc == nil || now.UnixMilli() < sc.NextAtMs {
		return
	}
	run := &meta.BackupRun{ID: format.NewID(now, rand.Reader), Kind: meta.BackupFull, Dest: sc.Dest, Scheduled: true}
	if !sc.FullDue(now.UnixMilli()) {
		if dest, err := b.stores.Open(sc.Dest); err == nil {
			if m, ok, err := backup.Newest(ctx, dest); err == nil && ok && m.ClusterID == st.ClusterID {
				run.Kind, run.Parent = meta.BackupIncremental, m.ID
			}
		}
	}
	code, _, err := b.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpStartBackup, NowMs: now.UnixMilli(), Backup: run})
	if err != nil || code != meta.ResultOK {
		b.log.Debug("scheduled backup not started", zap.Uint64("code", code), zap.Error(err))
		return
	}
	b.log.Info("scheduled backup started", zap.String("backup_id", run.ID), zap.String("kind", run.Kind), zap.String("dest", run.Dest))
}

// prune deletes the backups in dest older than keep that no kept backup
// builds on, each manifest first.
func (b *Backups) prune(ctx context.Context, dest store.Store, keep time.Duration) {
	all, err := format.ListManifests(ctx, dest)
	if err != nil {
		b.log.Warn("backups not pruned", zap.String("dest", dest.String()), zap.Error(err))
		return
	}
	for _, id := range format.Expired(all, b.now(), keep) {
		if _, err := backup.Delete(ctx, dest, id); err != nil {
			b.log.Warn("expired backup not deleted", zap.String("backup_id", id), zap.String("dest", dest.String()), zap.Error(err))
			continue
		}
		b.log.Info("expired backup deleted", zap.String("backup_id", id), zap.String("dest", dest.String()))
	}
}

// run reads the state and the running run id.
func (b *Backups) run(ctx context.Context, id string) (*meta.State, *meta.BackupRun, error) {
	st, err := b.host.ReadMeta(ctx)
	if err != nil {
		return nil, nil, err
	}
	r := st.BackupRun(id)
	if r == nil || !r.Running() {
		return nil, nil, errRunGone
	}
	return st, r, nil
}

// capture has shard's leader capture it and records the capture.
func (b *Backups) capture(ctx context.Context, st *meta.State, run *meta.BackupRun, shard, since uint64) error {
	var resp *brokerv1.CaptureShardResponse
	err := OnShardLeader(ctx, b.host, b.peers, b.log, st, shard, backupCaptureTimeout, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = brokerv1.NewPeerClient(conn).CaptureShard(ctx, &brokerv1.CaptureShardRequest{
			ShardId: shard, BackupId: run.ID, Dest: run.Dest, Since: since, ClusterId: st.ClusterID,
		})
		return err
	})
	if err != nil {
		return err
	}
	return b.record(ctx, &meta.Command{Op: meta.OpRecordBackup, Name: run.ID, Capture: &meta.ShardCapture{
		Shard: meta.EventShardID(shard), BackupFile: meta.BackupFile{Name: resp.GetName(), Bytes: resp.GetBytes(), SHA256: resp.GetSha256()},
		Index: resp.GetIndex(), Since: resp.GetSince(), Kind: resp.GetKind(), Records: resp.GetRecords(), Messages: resp.GetMessages(),
	}})
}

// record proposes a record_backup; a run no longer running is errRunGone.
func (b *Backups) record(ctx context.Context, c *meta.Command) error {
	code, _, err := b.host.ProposeMeta(ctx, c)
	if err != nil {
		return err
	}
	if code == meta.ResultNotFound {
		return errRunGone
	}
	return nil
}

// permanentError is a step's failure that no retry cures.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func permanent(err error) error { return permanentError{err} }

// step runs fn until it succeeds, backupStepTries times at most, noting
// each failure in the run; a permanent failure, a gone run or the end of
// ctx stops it at once.
func (b *Backups) step(ctx context.Context, id, what string, fn func() error) error {
	wait := backupBackoff
	var err error
	for try := 1; try <= backupStepTries; try++ {
		if err = fn(); err == nil {
			return nil
		}
		var perm permanentError
		if errors.Is(err, errRunGone) || ctx.Err() != nil || errors.As(err, &perm) || isPermanentStoreError(err) {
			break
		}
		b.log.Warn("backup step failed, trying again", zap.String("backup_id", id), zap.String("step", what), zap.Int("try", try), zap.Error(err))
		b.record(ctx, &meta.Command{Op: meta.OpRecordBackup, Name: id, Error: fmt.Sprintf("%s: try %d: %v", what, try, err)}) //nolint:errcheck // a note only
		if !sleep(ctx, wait) {
			break
		}
		wait = min(2*wait, backupBackoffMax)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isPermanentStoreError says err is a destination's refusal no retry cures.
func isPermanentStoreError(err error) bool {
	var u *store.URLError
	return errors.As(err, &u) || errors.Is(err, store.ErrAccessDenied) || errors.Is(err, store.ErrNoBucket) || errors.Is(err, store.ErrNoCredentials)
}
