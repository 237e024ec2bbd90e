package command

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

const (
	backupID     = "20300101T000000Z-0a1b2c"
	parentID     = "20291231T000000Z-ffffff"
	failingDest  = "file:///failing" // a run that fails after its first shards
	brokenSrc    = "file:///broken"  // a restore cut short after its first frame
	damagedID    = "20300101T000000Z-dddddd"
	missingID    = "20300101T000000Z-000000"
	backupsShard = 4
)

// fakeBackups answers the Backups service as a proxy would: a run of 4
// shards that moves 2 shards on at each GetBackupRun; it records the
// requests it got.
type fakeBackups struct {
	sundialv1.UnimplementedBackupsServer
	mu       sync.Mutex
	created  *sundialv1.CreateBackupRequest
	deleted  *sundialv1.DeleteBackupRequest
	restored *sundialv1.RestoreBackupRequest
	schedule *sundialv1.BackupSchedule
	polls    int
	calls    int
}

func (f *fakeBackups) call() {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
}

func (f *fakeBackups) calledTimes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// run is the run as the fake's polls have moved it on.
func (f *fakeBackups) run() *sundialv1.BackupRun {
	r := &sundialv1.BackupRun{Id: backupID, Kind: "full", Dest: f.created.GetDest(), Status: sundialv1.BackupStatus_BACKUP_STATUS_RUNNING,
		StartedAtUnixMs: 1893456000000, ShardsTotal: backupsShard}
	if f.created.GetIncremental() {
		r.Kind, r.Parent = "incremental", parentID
	}
	r.ShardsDone = uint32(min(2*f.polls, backupsShard))
	r.Bytes, r.Messages = int64(r.ShardsDone)*3<<20, int64(r.ShardsDone)*1000
	switch {
	case f.created.GetDest() == failingDest && f.polls >= 1:
		r.Status, r.Error, r.FinishedAtUnixMs = sundialv1.BackupStatus_BACKUP_STATUS_FAILED, "shard 103: capture: disk full", 1893456002000
	case r.ShardsDone == backupsShard:
		r.Status, r.FinishedAtUnixMs = sundialv1.BackupStatus_BACKUP_STATUS_DONE, 1893456065000
	}
	return r
}

func (f *fakeBackups) CreateBackup(_ context.Context, req *sundialv1.CreateBackupRequest) (*sundialv1.BackupRun, error) {
	f.call()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created, f.polls = req, 0
	return f.run(), nil
}

func (f *fakeBackups) GetBackupRun(_ context.Context, req *sundialv1.GetBackupRunRequest) (*sundialv1.BackupRun, error) {
	f.call()
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetId() != "" && req.GetId() != backupID {
		return nil, status.Errorf(codes.NotFound, "no backup run %s", req.GetId())
	}
	f.polls++
	return f.run(), nil
}

func (f *fakeBackups) ListBackupRuns(context.Context, *sundialv1.ListBackupRunsRequest) (*sundialv1.ListBackupRunsResponse, error) {
	f.call()
	return &sundialv1.ListBackupRunsResponse{Runs: fixedBackupRuns()}, nil
}

func (f *fakeBackups) ListBackups(_ context.Context, req *sundialv1.ListBackupsRequest) (*sundialv1.ListBackupsResponse, error) {
	f.call()
	if req.GetDest() == "s3://empty" {
		return &sundialv1.ListBackupsResponse{}, nil
	}
	return fixedBackups(), nil
}

func (f *fakeBackups) VerifyBackup(_ context.Context, req *sundialv1.VerifyBackupRequest) (*sundialv1.VerifyBackupResponse, error) {
	f.call()
	switch req.GetBackupId() {
	case damagedID:
		return nil, status.Error(codes.DataLoss, "shard-103.sdb: sha256 differs from the manifest's")
	case missingID:
		return nil, status.Errorf(codes.NotFound, "no backup %s in %s", missingID, req.GetDest())
	}
	return &sundialv1.VerifyBackupResponse{Chain: []string{parentID, req.GetBackupId()}, Files: 12, Bytes: 25 << 20}, nil
}

func (f *fakeBackups) DeleteBackup(_ context.Context, req *sundialv1.DeleteBackupRequest) (*sundialv1.DeleteBackupResponse, error) {
	f.call()
	f.mu.Lock()
	f.deleted = req
	f.mu.Unlock()
	if req.GetBackupId() == parentID {
		return nil, status.Errorf(codes.FailedPrecondition, "backup %s is the parent of kept backup %s: delete that first", parentID, backupID)
	}
	return &sundialv1.DeleteBackupResponse{Files: 6}, nil
}

func (f *fakeBackups) SetBackupSchedule(_ context.Context, req *sundialv1.SetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	f.call()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.schedule = req.GetSchedule()
	if f.schedule.GetEveryMs() == 0 {
		return &sundialv1.BackupSchedule{}, nil
	}
	return &sundialv1.BackupSchedule{Dest: f.schedule.GetDest(), EveryMs: f.schedule.GetEveryMs(), FullEveryMs: f.schedule.GetFullEveryMs(),
		KeepMs: f.schedule.GetKeepMs(), NextAtUnixMs: 1893456000000}, nil
}

func (f *fakeBackups) GetBackupSchedule(context.Context, *sundialv1.GetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	f.call()
	return &sundialv1.BackupSchedule{Dest: "s3://backups/prod", EveryMs: 3_600_000, FullEveryMs: 86_400_000, KeepMs: 7 * 86_400_000,
		NextAtUnixMs: 1893459600000, LastRunId: backupID}, nil
}

// restoreFrames are a restore of two shards, 4 MiB.
func restoreFrames() []*sundialv1.RestoreProgress {
	frame := func(phase string, done uint32, bytes int64) *sundialv1.RestoreProgress {
		return &sundialv1.RestoreProgress{Phase: phase, BackupId: backupID, Chain: []string{parentID, backupID}, ShardsTotal: 2, ShardsDone: done,
			BytesTotal: 4 << 20, BytesDone: bytes}
	}
	done := frame("done", 2, 4<<20)
	done.Messages, done.ClusterId = 123456, "c0ffee0123456789"
	return []*sundialv1.RestoreProgress{
		frame("verify", 0, 0), frame("verify", 1, 2<<20), frame("verify", 1, 3<<20), frame("verify", 2, 4<<20),
		frame("shards", 0, 0), frame("shards", 1, 2<<20), frame("shards", 2, 4<<20), frame("catalog", 2, 4<<20), done,
	}
}

func (f *fakeBackups) RestoreBackup(req *sundialv1.RestoreBackupRequest, st grpc.ServerStreamingServer[sundialv1.RestoreProgress]) error {
	f.call()
	f.mu.Lock()
	f.restored = req
	f.mu.Unlock()
	if req.GetSrc() == "file:///in-use" {
		return status.Error(codes.FailedPrecondition, "the cluster holds data: 3 topics; restore into a new cluster")
	}
	for _, p := range restoreFrames() {
		if err := st.Send(p); err != nil {
			return err
		}
		if req.GetSrc() == brokenSrc {
			return status.Error(codes.Unavailable, "broker 2 lost")
		}
	}
	return nil
}

func fixedBackupRuns() []*sundialv1.BackupRun {
	return []*sundialv1.BackupRun{
		{Id: backupID, Parent: parentID, Kind: "incremental", Dest: "s3://backups/prod?endpoint=127.0.0.1:9000", Status: sundialv1.BackupStatus_BACKUP_STATUS_RUNNING,
			StartedAtUnixMs: 1893456000000, ShardsTotal: 8, ShardsDone: 3, Bytes: 12_900_000, Messages: 40_000, Scheduled: true},
		{Id: parentID, Kind: "full", Dest: "s3://backups/prod?endpoint=127.0.0.1:9000", Status: sundialv1.BackupStatus_BACKUP_STATUS_DONE,
			StartedAtUnixMs: 1893369600000, FinishedAtUnixMs: 1893369665500, ShardsTotal: 8, ShardsDone: 8, Bytes: 1 << 30, Messages: 9_000_000},
		{Id: "20291230T000000Z-eeeeee", Kind: "full", Dest: "file:///var/backups", Status: sundialv1.BackupStatus_BACKUP_STATUS_FAILED,
			Error: "shard 105: capture: no replica answered", StartedAtUnixMs: 1893283200000, FinishedAtUnixMs: 1893283201000, ShardsTotal: 8, ShardsDone: 5},
	}
}

func fixedBackups() *sundialv1.ListBackupsResponse {
	return &sundialv1.ListBackupsResponse{
		Backups: []*sundialv1.BackupInfo{
			{Id: parentID, Kind: "full", CreatedAtUnixMs: 1893369600000, FinishedAtUnixMs: 1893369665500, Shards: 8, Messages: 9_000_000, Bytes: 1 << 30, ClusterId: "c0ffee0123456789"},
			{Id: backupID, Parent: parentID, Kind: "incremental", CreatedAtUnixMs: 1893456000000, FinishedAtUnixMs: 1893456010000, Shards: 8, Messages: 9_040_000, Bytes: 12_900_000, ClusterId: "c0ffee0123456789"},
		},
		Unfinished: []string{"20300102T000000Z-123456"},
	}
}

func serveBackups(t *testing.T) (*fakeBackups, string) {
	t.Helper()
	fake := &fakeBackups{}
	return fake, serve(t, func(s *grpc.Server) { sundialv1.RegisterBackupsServer(s, fake) })
}

func TestRenderBackups(t *testing.T) {
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderBackups(&b, format, newBackupsView("s3://backups/prod", fixedBackups())); err != nil {
				t.Fatalf("renderBackups(%s) = %v, want nil", format, err)
			}
			golden(t, "backups."+format, b.String())
			b.Reset()
			var runs []backupRunView
			for _, r := range fixedBackupRuns() {
				runs = append(runs, newBackupRunView(r))
			}
			if err := renderBackupRuns(&b, format, runs); err != nil {
				t.Fatalf("renderBackupRuns(%s) = %v, want nil", format, err)
			}
			golden(t, "backupruns."+format, b.String())
		})
	}
}

// Flags that cannot make a good request are refused before any call, with
// what to give instead.
func TestBackupUsageErrors(t *testing.T) {
	fake, proxy := serveBackups(t)
	for _, tc := range []cliCase{
		{name: "create without dest", args: []string{"backup", "create"}, wantStderr: "--dest is required"},
		{name: "create to a path", args: []string{"backup", "create", "--dest", "/var/backups"}, wantStderr: "file:///var/backups"},
		{name: "create to a relative path", args: []string{"backup", "create", "--dest", "backups"}, wantStderr: "absolute path"},
		{name: "create to a relative file URL", args: []string{"backup", "create", "--dest", "file://backups"}, wantStderr: "is a relative path"},
		{name: "create over http", args: []string{"backup", "create", "--dest", "http://host/b"}, wantStderr: `unknown scheme "http"`},
		{name: "create with credentials", args: []string{"backup", "create", "--dest", "s3://k:s@b/p"}, wantStderr: "must not hold credentials"},
		{name: "create with args", args: []string{"backup", "create", "--dest", "file:///b", "now"}, wantStderr: "takes no arguments"},
		{name: "create zero wait", args: []string{"backup", "create", "--dest", "file:///b", "--wait", "--wait-timeout", "0s"}, wantStderr: "--wait-timeout 0s"},
		{name: "list without dest", args: []string{"backup", "list"}, wantStderr: "--dest is required"},
		{name: "list without bucket", args: []string{"backup", "list", "--dest", "s3:///p"}, wantStderr: "needs a bucket"},
		{name: "status of a bad id", args: []string{"backup", "status", "latest"}, wantStderr: `"latest" is not a backup id`},
		{name: "status of two ids", args: []string{"backup", "status", backupID, parentID}, wantStderr: "at most one argument"},
		{name: "runs with args", args: []string{"backup", "runs", "x"}, wantStderr: "takes no arguments"},
		{name: "verify without backup", args: []string{"backup", "verify", "--dest", "file:///b"}, wantStderr: "--backup \"\": required"},
		{name: "verify a bad id", args: []string{"backup", "verify", "--dest", "file:///b", "--backup", "2030"}, wantStderr: "want the form 20300101T000000Z-0a1b2c"},
		{name: "delete without --yes", args: []string{"backup", "delete", "--dest", "file:///b", "--backup", backupID}, wantStderr: "pass --yes"},
		{name: "restore without src", args: []string{"backup", "restore", "--yes"}, wantStderr: "--src is required"},
		{name: "restore without --yes", args: []string{"backup", "restore", "--src", "file:///b"}, wantStderr: "pass --yes"},
		{name: "restore a bad id", args: []string{"backup", "restore", "--src", "file:///b", "--backup", "x", "--yes"}, wantStderr: `"x" is not a backup id`},
		{name: "unknown backup command", args: []string{"backup", "frob"}, wantStderr: `unknown command "frob"`},
		{name: "schedule without a command", args: []string{"backup", "schedule"}, wantStderr: "missing command"},
		{name: "schedule set without every", args: []string{"backup", "schedule", "set", "--dest", "file:///b"}, wantStderr: "--every is required"},
		{name: "schedule set without dest", args: []string{"backup", "schedule", "set", "--every", "1h"}, wantStderr: "--dest is required"},
		{name: "schedule set too often", args: []string{"backup", "schedule", "set", "--dest", "file:///b", "--every", "30s"}, wantStderr: "--every 30s: at least 1m"},
		{name: "schedule set bad duration", args: []string{"backup", "schedule", "set", "--dest", "file:///b", "--every", "1w"}, wantStderr: `--every "1w": want a positive duration`},
		{name: "schedule set keep too short", args: []string{"backup", "schedule", "set", "--dest", "file:///b", "--every", "1h", "--full-every", "1d", "--keep", "12h"},
			wantStderr: "--keep 12h: at least --full-every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.wantCode = ExitUsage
			tc.check(t, proxy)
		})
	}
	if n := fake.calledTimes(); n != 0 {
		t.Errorf("usage errors made %d calls, want none", n)
	}
}

func TestBackupCommands(t *testing.T) {
	fake, proxy := serveBackups(t)
	for _, tc := range []cliCase{
		{name: "create", args: []string{"backup", "create", "--dest", "file:///var/backups", "--incremental"}, wantCode: ExitOK,
			wantOut: "incremental", wantStderr: "backup " + backupID + " started; shardctl backup status " + backupID},
		{name: "create json", args: []string{"backup", "create", "--dest", "s3://backups/prod?endpoint=127.0.0.1:9000", "-o", "json"}, wantCode: ExitOK,
			wantOut: `"status": "running"`},
		{name: "list", args: []string{"backup", "list", "--dest", "s3://backups/prod"}, wantCode: ExitOK, wantOut: "20300102T000000Z-123456  -"},
		{name: "list empty", args: []string{"backup", "list", "--dest", "s3://empty"}, wantCode: ExitOK, wantOut: "no backups in s3://empty"},
		{name: "runs", args: []string{"backup", "runs"}, wantCode: ExitOK, wantOut: "shard 105: capture: no replica answered"},
		{name: "status", args: []string{"backup", "status", backupID, "-o", "yaml"}, wantCode: ExitOK, wantOut: "id: " + backupID},
		{name: "status of a run forgotten", args: []string{"backup", "status", parentID}, wantCode: ExitFailure, wantStderr: "no backup run " + parentID + " (shardctl backup list"},
		{name: "verify", args: []string{"backup", "verify", "--dest", "file:///b", "--backup", backupID}, wantCode: ExitOK,
			wantOut: "backup " + backupID + " verified: 12 files, 25.0 MiB (chain " + parentID + " → " + backupID + ")"},
		{name: "verify damaged", args: []string{"backup", "verify", "--dest", "file:///b", "--backup", damagedID}, wantCode: ExitFailure,
			wantStderr: "backup verify " + damagedID + ": shard-103.sdb: sha256 differs"},
		{name: "verify missing", args: []string{"backup", "verify", "--dest", "file:///b", "--backup", missingID}, wantCode: ExitFailure,
			wantStderr: "shardctl backup list --dest URL lists the backups"},
		{name: "delete", args: []string{"backup", "delete", "--dest", "file:///b", "--backup", backupID, "--yes"}, wantCode: ExitOK,
			wantOut: "backup " + backupID + " deleted from file:///b: 6 files"},
		{name: "delete a parent", args: []string{"backup", "delete", "--dest", "file:///b", "--backup", parentID, "--yes"}, wantCode: ExitFailure,
			wantStderr: "delete that first"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, proxy) })
	}
	if got := fake.created; got.GetDest() != "s3://backups/prod?endpoint=127.0.0.1:9000" || got.GetIncremental() || got.GetWait() {
		t.Errorf("backup create sent %v, want the dest, full, no server-side wait", got)
	}
	if got := fake.deleted; got.GetDest() != "file:///b" || got.GetBackupId() != parentID {
		t.Errorf("backup delete sent %v, want dest file:///b and backup %s", got, parentID)
	}
}

// create --wait polls the run to its end: a line per change of the shards
// done on stderr (not a terminal here), the run on stdout, exit 1 naming
// the error when the run fails.
func TestBackupCreateWait(t *testing.T) {
	_, proxy := serveBackups(t)
	code, out, stderr := run(t, "", "--proxy", proxy, "backup", "create", "--dest", "file:///var/backups", "--wait")
	want := "backup " + backupID + ": 0/4 shards, 0 B\n" +
		"backup " + backupID + ": 2/4 shards, 6.0 MiB\n" +
		"backup " + backupID + ": 4/4 shards, 12.0 MiB\n"
	if code != ExitOK || stderr != want || !strings.Contains(out, " done ") || !strings.Contains(out, "1m5s") {
		t.Errorf("backup create --wait = %d, stdout %q, stderr %q; want 0, the done run that took 1m5s, progress\n%s", code, out, stderr, want)
	}

	code, _, stderr = run(t, "", "--proxy", proxy, "backup", "create", "--dest", "file:///var/backups", "--wait", "--no-progress", "-o", "json")
	if code != ExitOK || stderr != "" {
		t.Errorf("backup create --wait --no-progress = %d, stderr %q; want 0 and nothing on stderr", code, stderr)
	}

	code, out, stderr = run(t, "", "--proxy", proxy, "backup", "create", "--dest", failingDest, "--wait", "-o", "json")
	if code != ExitFailure || !strings.Contains(stderr, "backup "+backupID+" failed: shard 103: capture: disk full") || !strings.Contains(out, `"status": "failed"`) {
		t.Errorf("backup create --wait of a failing run = %d, stdout %q, stderr %q; want 1, the failed run, its error", code, out, stderr)
	}
}

// restore confirms, shows each phase's shards on stderr and prints the
// summary; a stream cut short says how to resume, a refusal why.
func TestBackupRestore(t *testing.T) {
	fake, proxy := serveBackups(t)
	code, out, stderr := run(t, "", "--proxy", proxy, "backup", "restore", "--src", "file:///var/backups", "--yes")
	wantErr := "restore " + backupID + ": verify 0/2 shards, 0 B of 4.0 MiB\n" +
		"restore " + backupID + ": verify 1/2 shards, 2.0 MiB of 4.0 MiB\n" +
		"restore " + backupID + ": verify 2/2 shards, 4.0 MiB of 4.0 MiB\n" +
		"restore " + backupID + ": shards 0/2 shards, 0 B of 4.0 MiB\n" +
		"restore " + backupID + ": shards 1/2 shards, 2.0 MiB of 4.0 MiB\n" +
		"restore " + backupID + ": shards 2/2 shards, 4.0 MiB of 4.0 MiB\n" +
		"restore " + backupID + ": catalog 2/2 shards, 4.0 MiB of 4.0 MiB\n" +
		"restore " + backupID + ": done 2/2 shards, 4.0 MiB of 4.0 MiB\n"
	if code != ExitOK || stderr != wantErr {
		t.Errorf("backup restore = %d, stderr %q; want 0, progress\n%s", code, stderr, wantErr)
	}
	for _, want := range []string{backupID, parentID + "," + backupID, "123456", "c0ffee0123456789"} {
		if !strings.Contains(out, want) {
			t.Errorf("backup restore stdout %q, want it to hold %s", out, want)
		}
	}
	if got := fake.restored; got.GetSrc() != "file:///var/backups" || got.GetBackupId() != "" {
		t.Errorf("backup restore sent %v, want src file:///var/backups and no backup id (the newest)", got)
	}
	for _, tc := range []cliCase{
		{name: "json", args: []string{"backup", "restore", "--src", "file:///b", "--backup", backupID, "--yes", "--no-progress", "-o", "json"},
			wantCode: ExitOK, wantOut: `"cluster_id": "c0ffee0123456789"`},
		{name: "cut short", args: []string{"backup", "restore", "--src", brokenSrc, "--yes"}, wantCode: ExitFailure,
			wantStderr: "backup restore: unavailable: broker 2 lost; run the same command again to resume the restore"},
		{name: "refused", args: []string{"backup", "restore", "--src", "file:///in-use", "--yes"}, wantCode: ExitFailure,
			wantStderr: "shardctl: backup restore: the cluster holds data: 3 topics; restore into a new cluster\n"},
		{name: "not confirmed", args: []string{"backup", "restore", "--src", "file:///b", "--yes=false"}, wantCode: ExitUsage, wantStderr: "pass --yes"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, proxy) })
	}
	if got := fake.restored; got.GetBackupId() != "" && got.GetSrc() != "file:///in-use" {
		t.Errorf("the last restore sent %v, want the refused one", got)
	}
}

func TestBackupSchedule(t *testing.T) {
	fake, proxy := serveBackups(t)
	for _, tc := range []cliCase{
		{name: "set", args: []string{"backup", "schedule", "set", "--dest", "file:///var/backups", "--every", "1h", "--full-every", "1d", "--keep", "7d"},
			wantCode: ExitOK, wantOut: "file:///var/backups  1h     1d          7d    2030-01-01T00:00:00Z  -"},
		{name: "show", args: []string{"backup", "schedule", "show"}, wantCode: ExitOK, wantOut: "s3://backups/prod  1h     1d          7d    2030-01-01T01:00:00Z  " + backupID},
		{name: "show json", args: []string{"backup", "schedule", "show", "-o", "json"}, wantCode: ExitOK, wantOut: `"keep_ms": 604800000`},
		{name: "clear", args: []string{"backup", "schedule", "clear"}, wantCode: ExitOK, wantOut: "no backup schedule"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, proxy) })
	}
	if got := fake.schedule; got.GetEveryMs() != 0 {
		t.Errorf("backup schedule clear sent %v, want every_ms 0", got)
	}
	run(t, "", "--proxy", proxy, "backup", "schedule", "set", "--dest", "s3://b/p", "--every", "90m")
	if got := fake.schedule; got.GetDest() != "s3://b/p" || got.GetEveryMs() != 5_400_000 || got.GetFullEveryMs() != 0 || got.GetKeepMs() != 0 {
		t.Errorf("backup schedule set --every 90m sent %v, want dest s3://b/p, every_ms 5400000, nothing else", got)
	}
}

func TestParseAndFormatDays(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   time.Duration
		format string
	}{
		{"7d", 7 * 24 * time.Hour, "7d"},
		{"1d12h", 36 * time.Hour, "1d12h"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"1h", time.Hour, "1h"},
		{"2h0m30s", 2*time.Hour + 30*time.Second, "2h0m30s"},
		{"45s", 45 * time.Second, "45s"},
	} {
		got, err := parseDays(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseDays(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if f := formatDays(got); f != tc.format {
			t.Errorf("formatDays(%v) = %q, want %q", got, f, tc.format)
		}
	}
	for _, bad := range []string{"d", "1.5d", "-1d", "1dx", "1w", ""} {
		if d, err := parseDays(bad); err == nil {
			t.Errorf("parseDays(%q) = %v, want an error", bad, d)
		}
	}
}
