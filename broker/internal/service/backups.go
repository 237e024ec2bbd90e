package service

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/backup"
	"github.com/sundialmq/sundial/broker/internal/backup/format"
	"github.com/sundialmq/sundial/broker/internal/backup/store"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Backups serves sundialv1.Backups on every broker: runs are started and
// followed through the meta group (the meta leader's executor carries them
// out, operator.Backups), destinations are read with this broker's
// credentials, and a restore is coordinated by the broker serving the call
// (backup.Restorer).
type Backups struct {
	sundialv1.UnimplementedBackupsServer
	meta     *host.MetaClient
	replicas *host.Replicas
	stores   *backup.Stores
	restorer *backup.Restorer
	// runner is this broker's backup runner: kicked when a run starts
	// here, and telling the waiters when it ends one.
	runner *operator.Backups
	peers  *peer.Conns
	log    *zap.Logger
	now    func() time.Time
}

// NewBackups returns the Backups service.
func NewBackups(h *host.Host, peers *peer.Conns, stores *backup.Stores, m *backup.Metrics, runner *operator.Backups, log *zap.Logger) *Backups {
	b := &Backups{meta: h.MetaClient(), replicas: h.Replicas(), stores: stores, runner: runner, peers: peers, log: log.Named("backups"), now: time.Now}
	b.restorer = backup.NewRestorer(stores, h.MetaClient(), shardSteps{b: b, peers: peers}, b.log, m)
	return b
}

// backupWaitPoll is how often a CreateBackup with wait reads its run when
// no drive here tells it the run ended (the meta leader changed).
const backupWaitPoll = time.Second

// CreateBackup starts a backup run; see backup.proto. It is served on the
// meta leader (forwarded there), whose runner starts the run at once and
// tells a waiting call when it ends.
func (b *Backups) CreateBackup(ctx context.Context, req *sundialv1.CreateBackupRequest) (*sundialv1.BackupRun, error) {
	if resp, forwarded, err := toMetaLeader(ctx, b.meta, b.peers, sundialv1.NewBackupsClient, sundialv1.BackupsClient.CreateBackup, req); forwarded {
		return resp, err
	}
	st, err := b.open("dest", req.GetDest())
	if err != nil {
		return nil, err
	}
	run := &meta.BackupRun{Kind: meta.BackupFull, Dest: req.GetDest()}
	if req.GetIncremental() {
		parent, ok, err := backup.Newest(ctx, st)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "incremental", Description: "there is no complete backup in " + st.String() + " to build on: make a full backup first"})
		}
		if id := b.meta.Meta().ClusterID; parent.ClusterID != id {
			return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "incremental", Description: "the newest backup in " + st.String() + " (" + parent.ID + ") is of cluster " + parent.ClusterID + ", not this one (" + id + "): make a full backup"})
		}
		run.Kind, run.Parent = meta.BackupIncremental, parent.ID
	}
	run.ID = format.NewID(b.now(), rand.Reader)
	code, _, err := b.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpStartBackup, NowMs: b.now().UnixMilli(), Backup: run})
	if err != nil {
		return nil, err
	}
	switch code {
	case meta.ResultOK, meta.ResultNoop:
	case meta.ResultBusy:
		running := b.meta.Meta().RunningBackup()
		id := "another backup"
		if running != nil {
			id = "backup " + running.ID
		}
		return nil, status.Errorf(codes.FailedPrecondition, "%s is running: wait for it (shardctl backup status) and try again", id)
	default:
		return nil, status.Errorf(codes.Internal, "start_backup answered %d", code)
	}
	b.log.Info("backup started", zap.String("backup_id", run.ID), zap.String("kind", run.Kind), zap.String("dest", st.String()))
	b.runner.Kick()
	// A wait ends a little before the call's deadline, so its answer (the
	// run still running) reaches the caller.
	wait := ctx.Done()
	if d, ok := ctx.Deadline(); ok {
		margin := min(time.Until(d)/10, 2*time.Second)
		wctx, cancel := context.WithDeadline(ctx, d.Add(-margin))
		defer cancel()
		wait = wctx.Done()
	}
	for {
		ended := b.runner.Ended()
		r, err := b.runOf(ctx, run.ID, st.String())
		if err != nil || !req.GetWait() || r.GetStatus() != sundialv1.BackupStatus_BACKUP_STATUS_RUNNING {
			return r, err
		}
		select {
		case <-wait:
			return r, nil // the run goes on
		case <-ended:
		case <-time.After(backupWaitPoll):
		}
	}
}

// runOf reads the run id; a call whose deadline passed answers it running.
func (b *Backups) runOf(ctx context.Context, id, dest string) (*sundialv1.BackupRun, error) {
	st, err := b.meta.ReadMeta(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return &sundialv1.BackupRun{Id: id, Dest: dest, Status: sundialv1.BackupStatus_BACKUP_STATUS_RUNNING}, nil
		}
		return nil, err
	}
	if r := st.BackupRun(id); r != nil {
		return runProto(r, dest), nil
	}
	return &sundialv1.BackupRun{Id: id, Dest: dest, Status: sundialv1.BackupStatus_BACKUP_STATUS_RUNNING}, nil
}

// GetBackupRun answers a run the meta state keeps.
func (b *Backups) GetBackupRun(ctx context.Context, req *sundialv1.GetBackupRunRequest) (*sundialv1.BackupRun, error) {
	st, err := b.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	r := st.BackupRun(req.GetId())
	if r == nil {
		what := "no backup run " + req.GetId()
		if req.GetId() == "" {
			what = "no backup has run"
		}
		return nil, status.Error(codes.NotFound, what+" (the cluster keeps the last 20 runs; shardctl backup list shows the backups in a destination)")
	}
	return runProto(r, ""), nil
}

// ListBackupRuns answers the runs the meta state keeps, newest first.
func (b *Backups) ListBackupRuns(ctx context.Context, _ *sundialv1.ListBackupRunsRequest) (*sundialv1.ListBackupRunsResponse, error) {
	st, err := b.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.ListBackupRunsResponse{}
	for i := len(st.Backups) - 1; i >= 0; i-- {
		resp.Runs = append(resp.Runs, runProto(st.Backups[i], ""))
	}
	return resp, nil
}

// ListBackups answers the backups in a destination.
func (b *Backups) ListBackups(ctx context.Context, req *sundialv1.ListBackupsRequest) (*sundialv1.ListBackupsResponse, error) {
	st, err := b.open("dest", req.GetDest())
	if err != nil {
		return nil, err
	}
	all, err := format.ListManifests(ctx, st)
	if err != nil {
		return nil, err
	}
	unfinished, err := format.Unfinished(ctx, st)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.ListBackupsResponse{Unfinished: unfinished}
	for _, m := range all {
		resp.Backups = append(resp.Backups, &sundialv1.BackupInfo{
			Id: m.ID, Parent: m.Parent, Kind: m.Kind, CreatedAtUnixMs: m.CreatedUnixMs, FinishedAtUnixMs: m.FinishedUnixMs,
			Shards: uint32(len(m.Shards)), Messages: m.Messages, Bytes: m.Bytes, ClusterId: m.ClusterID,
		})
	}
	return resp, nil
}

// VerifyBackup reads back every file of a backup's chain.
func (b *Backups) VerifyBackup(ctx context.Context, req *sundialv1.VerifyBackupRequest) (*sundialv1.VerifyBackupResponse, error) {
	if req.GetBackupId() == "" {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "backup_id", Description: "must be set"})
	}
	st, err := b.open("dest", req.GetDest())
	if err != nil {
		return nil, err
	}
	all, err := format.ListManifests(ctx, st)
	if err != nil {
		return nil, err
	}
	chain, err := format.Chain(all, req.GetBackupId())
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.VerifyBackupResponse{}
	for _, m := range chain {
		if err := format.Verify(ctx, st, m, func(int64, int64) {}); err != nil {
			return nil, err
		}
		resp.Chain = append(resp.Chain, m.ID)
		resp.Files += uint32(len(m.Shards) + 1)
		resp.Bytes += m.Bytes
	}
	return resp, nil
}

// DeleteBackup deletes a backup's files, manifest first.
func (b *Backups) DeleteBackup(ctx context.Context, req *sundialv1.DeleteBackupRequest) (*sundialv1.DeleteBackupResponse, error) {
	id := req.GetBackupId()
	if !format.ValidID(id) {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "backup_id", Description: "must be a backup id such as 20261206T043000Z-1a2b3c"})
	}
	st, err := b.open("dest", req.GetDest())
	if err != nil {
		return nil, err
	}
	all, err := format.ListManifests(ctx, st)
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if m.Parent == id {
			return nil, status.Errorf(codes.FailedPrecondition, "incremental backup %s builds on %s: delete it first", m.ID, id)
		}
	}
	n, err := backup.Delete(ctx, st, id)
	if err != nil {
		return nil, err
	}
	b.log.Info("backup deleted", zap.String("backup_id", id), zap.String("dest", st.String()), zap.Int("files", n))
	return &sundialv1.DeleteBackupResponse{Files: uint32(n)}, nil
}

// RestoreBackup restores a backup into this cluster, streaming progress.
func (b *Backups) RestoreBackup(req *sundialv1.RestoreBackupRequest, stream grpc.ServerStreamingServer[sundialv1.RestoreProgress]) error {
	if _, err := b.open("src", req.GetSrc()); err != nil {
		return err
	}
	if id := req.GetBackupId(); id != "" && !format.ValidID(id) {
		return apierr.InvalidArgument(apierr.FieldViolation{Field: "backup_id", Description: "must be a backup id such as 20261206T043000Z-1a2b3c"})
	}
	return b.restorer.Restore(stream.Context(), req.GetSrc(), req.GetBackupId(), stream.Send)
}

// SetBackupSchedule sets or clears the backup schedule.
func (b *Backups) SetBackupSchedule(ctx context.Context, req *sundialv1.SetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	p := req.GetSchedule()
	var sc *meta.BackupSchedule
	if p.GetEveryMs() != 0 {
		if _, err := b.open("schedule.dest", p.GetDest()); err != nil {
			return nil, err
		}
		sc = &meta.BackupSchedule{Dest: p.GetDest(), EveryMs: p.GetEveryMs(), FullEveryMs: p.GetFullEveryMs(), KeepMs: p.GetKeepMs()}
		if why := sc.Valid(); why != "" {
			return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "schedule", Description: why})
		}
	}
	code, _, err := b.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpSetBackupSchedule, NowMs: b.now().UnixMilli(), Schedule: sc})
	if err != nil {
		return nil, err
	}
	if code != meta.ResultOK {
		return nil, status.Errorf(codes.Internal, "set_backup_schedule answered %d", code)
	}
	b.log.Info("backup schedule set", zap.String("dest", p.GetDest()), zap.Int64("every_ms", p.GetEveryMs()),
		zap.Int64("full_every_ms", p.GetFullEveryMs()), zap.Int64("keep_ms", p.GetKeepMs()))
	return b.GetBackupSchedule(ctx, &sundialv1.GetBackupScheduleRequest{})
}

// GetBackupSchedule answers the backup schedule.
func (b *Backups) GetBackupSchedule(ctx context.Context, _ *sundialv1.GetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	st, err := b.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	sc := st.BackupSchedule
	if sc == nil {
		return &sundialv1.BackupSchedule{}, nil
	}
	return &sundialv1.BackupSchedule{Dest: sc.Dest, EveryMs: sc.EveryMs, FullEveryMs: sc.FullEveryMs, KeepMs: sc.KeepMs, NextAtUnixMs: sc.NextAtMs, LastRunId: sc.LastRun}, nil
}

// open opens a destination named by field, a bad URL answering
// InvalidArgument on it.
func (b *Backups) open(field, url string) (store.Store, error) {
	if url == "" {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: field, Description: "must be set: file:///absolute/dir or s3://bucket/prefix"})
	}
	st, err := b.stores.Open(url)
	var u *store.URLError
	if errors.As(err, &u) {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: field, Description: strings.TrimPrefix(u.Error(), "store: ")})
	}
	return st, err
}

func runProto(r *meta.BackupRun, dest string) *sundialv1.BackupRun {
	if dest == "" {
		dest = r.Dest // destination URLs hold no secrets (store.Open refuses them)
	}
	p := &sundialv1.BackupRun{
		Id: r.ID, Parent: r.Parent, Kind: r.Kind, Dest: dest, Error: r.Error, Scheduled: r.Scheduled,
		StartedAtUnixMs: r.StartedAtMs, FinishedAtUnixMs: r.FinishedAtMs, ShardsTotal: uint32(len(r.Shards)), ShardsDone: uint32(len(r.Captures)),
	}
	switch r.Status {
	case meta.BackupRunning:
		p.Status = sundialv1.BackupStatus_BACKUP_STATUS_RUNNING
	case meta.BackupDone:
		p.Status = sundialv1.BackupStatus_BACKUP_STATUS_DONE
	case meta.BackupFailed:
		p.Status = sundialv1.BackupStatus_BACKUP_STATUS_FAILED
	}
	if r.Catalog != nil {
		p.Bytes += r.Catalog.Bytes
	}
	for _, c := range r.Captures {
		p.Bytes += c.Bytes
		p.Messages += c.Messages
	}
	return p
}

// shardSteps proposes restore steps to shards' leaders, wherever they run.
type shardSteps struct {
	b     *Backups
	peers *peer.Conns
}

// restoreStepTimeout bounds one restore step's call.
const restoreStepTimeout = 30 * time.Second

func (s shardSteps) RestoreShard(ctx context.Context, req *brokerv1.RestoreShardRequest) error {
	st := s.b.meta.Meta()
	var last error
	// A shard between leaders answers Unavailable: the step is tried
	// again (steps are idempotent) for as long as ctx allows.
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		last = operator.OnShardLeader(ctx, s.b.replicas, s.peers, s.b.log, st, req.GetShardId(), restoreStepTimeout, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := brokerv1.NewPeerClient(conn).RestoreShard(ctx, req)
			return err
		})
		if last == nil || !retryable(last) {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(wait):
		}
		st = s.b.meta.Meta()
	}
}

// retryable says a peer call's error may pass: a shard between leaders,
// a broker that stopped or did not answer in time.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	_, notLeader := apierr.AsNotLeader(err)
	return notLeader || errors.Is(err, context.DeadlineExceeded)
}

// backupStatus translates the errors of backups and restores.
func backupStatus(err error) (*status.Status, bool) {
	var u *store.URLError
	var mismatch *backup.ShardsMismatchError
	var refused *backup.RestoreRefusedError
	var ferr *format.VersionError
	switch {
	case errors.As(err, &u):
		return status.Convert(apierr.InvalidArgument(apierr.FieldViolation{Field: "dest", Description: u.Error()})), true
	case errors.As(err, &ferr):
		return status.New(codes.Unimplemented, err.Error()), true
	case errors.Is(err, format.ErrCorrupt), errors.Is(err, format.ErrTruncated):
		return status.New(codes.DataLoss, err.Error()), true
	case errors.Is(err, store.ErrNotFound), errors.Is(err, format.ErrNoBackup):
		return status.New(codes.NotFound, err.Error()), true
	case errors.Is(err, backup.ErrClusterHoldsData), errors.As(err, &mismatch), errors.As(err, &refused):
		return status.New(codes.FailedPrecondition, err.Error()), true
	case errors.Is(err, store.ErrAccessDenied), errors.Is(err, store.ErrNoBucket), errors.Is(err, store.ErrNoCredentials):
		return status.New(codes.FailedPrecondition, "the broker cannot use the destination: "+err.Error()), true
	}
	return nil, false
}
