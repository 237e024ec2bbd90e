package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

const testBackupID = "20300101T000000Z-0a1b2c"

// Destinations the fake Backups service answers in their own way.
const (
	unavailableDest = "file:///unavailable" // create and delete answer Unavailable, as a broker without a meta leader
	slowDest        = "file:///slow"        // a create that waits takes slowCreate
	brokenSrc       = "file:///broken"      // a restore sends one frame, then DataLoss
	flakySrc        = "file:///flaky"       // the first restore fails Unavailable before any frame
)

const slowCreate = 1200 * time.Millisecond

// fakeBackups answers the Backups service as brokers would; the brokers of
// a test cluster share one, which counts the calls that reach any of them.
type fakeBackups struct {
	sundialv1.UnimplementedBackupsServer
	calls    atomic.Int32 // unary calls
	restores atomic.Int32 // RestoreBackup streams
	restored atomic.Pointer[sundialv1.RestoreBackupRequest]
}

func (f *fakeBackups) CreateBackup(ctx context.Context, req *sundialv1.CreateBackupRequest) (*sundialv1.BackupRun, error) {
	f.calls.Add(1)
	run := &sundialv1.BackupRun{Id: testBackupID, Kind: "full", Dest: req.GetDest(), Status: sundialv1.BackupStatus_BACKUP_STATUS_RUNNING, ShardsTotal: 4}
	if req.GetIncremental() {
		run.Kind, run.Parent = "incremental", "20291231T000000Z-ffffff"
	}
	switch req.GetDest() {
	case unavailableDest:
		return nil, status.Error(codes.Unavailable, "meta leader unknown")
	case slowDest:
		select {
		case <-time.After(slowCreate):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if req.GetWait() {
		run.Status, run.ShardsDone = sundialv1.BackupStatus_BACKUP_STATUS_DONE, 4
	}
	return run, nil
}

func (f *fakeBackups) GetBackupRun(_ context.Context, req *sundialv1.GetBackupRunRequest) (*sundialv1.BackupRun, error) {
	f.calls.Add(1)
	id := req.GetId()
	if id == "" {
		id = testBackupID
	}
	return &sundialv1.BackupRun{Id: id, Status: sundialv1.BackupStatus_BACKUP_STATUS_DONE}, nil
}

func (f *fakeBackups) ListBackupRuns(context.Context, *sundialv1.ListBackupRunsRequest) (*sundialv1.ListBackupRunsResponse, error) {
	f.calls.Add(1)
	return &sundialv1.ListBackupRunsResponse{Runs: []*sundialv1.BackupRun{{Id: testBackupID}, {Id: "20291231T000000Z-ffffff"}}}, nil
}

func (f *fakeBackups) ListBackups(_ context.Context, req *sundialv1.ListBackupsRequest) (*sundialv1.ListBackupsResponse, error) {
	f.calls.Add(1)
	return &sundialv1.ListBackupsResponse{
		Backups:    []*sundialv1.BackupInfo{{Id: testBackupID, Kind: "full", Shards: 4, ClusterId: req.GetDest()}},
		Unfinished: []string{"20300102T000000Z-000001"},
	}, nil
}

func (f *fakeBackups) VerifyBackup(_ context.Context, req *sundialv1.VerifyBackupRequest) (*sundialv1.VerifyBackupResponse, error) {
	f.calls.Add(1)
	return &sundialv1.VerifyBackupResponse{Chain: []string{req.GetBackupId()}, Files: 6, Bytes: 4096}, nil
}

func (f *fakeBackups) DeleteBackup(_ context.Context, req *sundialv1.DeleteBackupRequest) (*sundialv1.DeleteBackupResponse, error) {
	f.calls.Add(1)
	if req.GetDest() == unavailableDest {
		return nil, status.Error(codes.Unavailable, "meta leader unknown")
	}
	return &sundialv1.DeleteBackupResponse{Files: 6}, nil
}

func (f *fakeBackups) SetBackupSchedule(_ context.Context, req *sundialv1.SetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	f.calls.Add(1)
	sc := proto.CloneOf(req.GetSchedule())
	sc.NextAtUnixMs = 1893456000000
	return sc, nil
}

func (f *fakeBackups) GetBackupSchedule(context.Context, *sundialv1.GetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	f.calls.Add(1)
	return &sundialv1.BackupSchedule{Dest: "file:///backups", EveryMs: 3_600_000, LastRunId: testBackupID}, nil
}

// restorePhases are the frames of a restore of two shards.
var restorePhases = []string{"verify", "shards", "shards", "catalog", "done"}

func (f *fakeBackups) RestoreBackup(req *sundialv1.RestoreBackupRequest, st grpc.ServerStreamingServer[sundialv1.RestoreProgress]) error {
	n := f.restores.Add(1)
	f.restored.Store(req)
	if req.GetSrc() == flakySrc && n == 1 {
		return status.Error(codes.Unavailable, "broker stopping")
	}
	done := uint32(0)
	for _, phase := range restorePhases {
		if phase == "shards" {
			done++
		}
		p := &sundialv1.RestoreProgress{Phase: phase, BackupId: testBackupID, Chain: []string{testBackupID}, ShardsTotal: 2, ShardsDone: done}
		if phase == "done" {
			p.Messages, p.ClusterId = 42, "c0ffee"
		}
		if err := st.Send(p); err != nil {
			return err
		}
		if req.GetSrc() == brokenSrc {
			return status.Error(codes.DataLoss, "shard-2.sdb: truncated at byte 100 of 4096")
		}
	}
	return nil
}

// Each Backups call reaches one broker, once, and its answer comes back.
func TestBackupsCallsReachABroker(t *testing.T) {
	_, leader, conn := startCluster(t)
	bk := sundialv1.NewBackupsClient(conn)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() (string, error) // answers what the broker echoed
		want string
	}{
		{"create", func() (string, error) {
			r, err := bk.CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: "file:///backups", Incremental: true})
			return r.GetDest() + " " + r.GetKind() + " " + r.GetStatus().String(), err
		}, "file:///backups incremental BACKUP_STATUS_RUNNING"},
		{"create and wait", func() (string, error) {
			r, err := bk.CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: "s3://b/p?endpoint=127.0.0.1:9000", Wait: true})
			return r.GetDest() + " " + r.GetStatus().String(), err
		}, "s3://b/p?endpoint=127.0.0.1:9000 BACKUP_STATUS_DONE"},
		{"newest run", func() (string, error) {
			r, err := bk.GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{})
			return r.GetId(), err
		}, testBackupID},
		{"run by id", func() (string, error) {
			r, err := bk.GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: "20291231T000000Z-ffffff"})
			return r.GetId(), err
		}, "20291231T000000Z-ffffff"},
		{"runs", func() (string, error) {
			r, err := bk.ListBackupRuns(ctx, &sundialv1.ListBackupRunsRequest{})
			return r.GetRuns()[0].GetId() + " " + r.GetRuns()[1].GetId(), err
		}, testBackupID + " 20291231T000000Z-ffffff"},
		{"list", func() (string, error) {
			r, err := bk.ListBackups(ctx, &sundialv1.ListBackupsRequest{Dest: "file:///backups"})
			return r.GetBackups()[0].GetClusterId() + " " + strings.Join(r.GetUnfinished(), ","), err
		}, "file:///backups 20300102T000000Z-000001"},
		{"verify", func() (string, error) {
			r, err := bk.VerifyBackup(ctx, &sundialv1.VerifyBackupRequest{Dest: "file:///backups", BackupId: testBackupID})
			return strings.Join(r.GetChain(), ","), err
		}, testBackupID},
		{"delete", func() (string, error) {
			r, err := bk.DeleteBackup(ctx, &sundialv1.DeleteBackupRequest{Dest: "file:///backups", BackupId: testBackupID})
			return fmt.Sprintf("%d files", r.GetFiles()), err
		}, "6 files"},
		{"set schedule", func() (string, error) {
			r, err := bk.SetBackupSchedule(ctx, &sundialv1.SetBackupScheduleRequest{Schedule: &sundialv1.BackupSchedule{Dest: "file:///backups", EveryMs: 3_600_000}})
			return fmt.Sprintf("%s %d %d", r.GetDest(), r.GetEveryMs(), r.GetNextAtUnixMs()), err
		}, "file:///backups 3600000 1893456000000"},
		{"schedule", func() (string, error) {
			r, err := bk.GetBackupSchedule(ctx, &sundialv1.GetBackupScheduleRequest{})
			return r.GetLastRunId(), err
		}, testBackupID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := leader.backups.calls.Load()
			got, err := tc.call()
			if err != nil || got != tc.want {
				t.Fatalf("%s = %q, %v; want %q, nil", tc.name, got, err, tc.want)
			}
			if n := leader.backups.calls.Load() - before; n != 1 {
				t.Errorf("%s reached the brokers %d times, want 1", tc.name, n)
			}
		})
	}
}

// restore runs RestoreBackup of src through conn and answers the phases of
// the frames received and the error the stream ended with (nil at its
// end).
func restore(t *testing.T, conn *grpc.ClientConn, src string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := sundialv1.NewBackupsClient(conn).RestoreBackup(ctx, &sundialv1.RestoreBackupRequest{Src: src})
	if err != nil {
		return nil, err
	}
	var phases []string
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return phases, nil
		}
		if err != nil {
			return phases, err
		}
		phases = append(phases, p.GetPhase())
	}
}

// The proxy relays every frame of a broker's restore stream until it ends;
// an error after a frame is the answer (the stream is not sent again), and
// a broker failing before its first frame is left for another.
func TestRestoreRelaysEveryFrame(t *testing.T) {
	_, leader, conn := startCluster(t)
	for _, tc := range []struct {
		name         string
		src          string
		wantPhases   []string
		wantCode     codes.Code
		wantRestores int32
	}{
		{"every frame", "file:///backups", restorePhases, codes.OK, 1},
		{"error after a frame", brokenSrc, restorePhases[:1], codes.DataLoss, 1},
		{"broker fails before a frame", flakySrc, restorePhases, codes.OK, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader.backups.restores.Store(0)
			phases, err := restore(t, conn, tc.src)
			if !slices.Equal(phases, tc.wantPhases) || status.Code(err) != tc.wantCode {
				t.Fatalf("RestoreBackup(%s) = frames %v, %v; want %v, %v", tc.src, phases, err, tc.wantPhases, tc.wantCode)
			}
			if n := leader.backups.restores.Load(); n != tc.wantRestores {
				t.Errorf("RestoreBackup(%s) reached the brokers %d times, want %d", tc.src, n, tc.wantRestores)
			}
		})
	}
	_, err := restore(t, conn, brokenSrc)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "shard-2.sdb: truncated") {
		t.Errorf("RestoreBackup(%s) error message = %q, want the broker's", brokenSrc, msg)
	}
}

// A create or delete a broker answered, even Unavailable, is not sent to
// another broker: it may have taken effect there.
func TestBackupChangesAnsweredAreNotRetried(t *testing.T) {
	_, leader, conn := startCluster(t)
	bk := sundialv1.NewBackupsClient(conn)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"create", func() error {
			_, err := bk.CreateBackup(t.Context(), &sundialv1.CreateBackupRequest{Dest: unavailableDest})
			return err
		}},
		{"delete", func() error {
			_, err := bk.DeleteBackup(t.Context(), &sundialv1.DeleteBackupRequest{Dest: unavailableDest, BackupId: testBackupID})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := leader.backups.calls.Load()
			err := tc.call()
			if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "meta leader unknown") {
				t.Fatalf("%s = %v, want the broker's Unavailable", tc.name, err)
			}
			if n := leader.backups.calls.Load() - before; n != 1 {
				t.Errorf("%s reached the brokers %d times, want 1", tc.name, n)
			}
		})
	}
}

// A create that waits runs past the forward timeout, to the caller's
// deadline.
func TestCreateBackupWaitOutlastsTheForwardTimeout(t *testing.T) {
	_, _, conn := startClusterWith(t, nil, func(c *Config) { c.ForwardTimeout = slowCreate / 3 })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	run, err := sundialv1.NewBackupsClient(conn).CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: slowDest, Wait: true})
	if err != nil || run.GetStatus() != sundialv1.BackupStatus_BACKUP_STATUS_DONE {
		t.Fatalf("CreateBackup(wait, the broker answering after 3 forward timeouts) = %v, %v; want the done run", run, err)
	}
}

// A request of the wrong shape is InvalidArgument naming the field, and no
// broker sees it.
func TestBackupsInvalidRequests(t *testing.T) {
	_, leader, conn := startCluster(t)
	bk := sundialv1.NewBackupsClient(conn)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"create without dest", func() error { _, err := bk.CreateBackup(ctx, &sundialv1.CreateBackupRequest{}); return err }, "dest"},
		{"create to a relative path", func() error {
			_, err := bk.CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: "file://backups"})
			return err
		}, "dest"},
		{"run of a bad id", func() error { _, err := bk.GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: "latest"}); return err }, "id"},
		{"list over http://", func() error {
			_, err := bk.ListBackups(ctx, &sundialv1.ListBackupsRequest{Dest: "http://host/b"})
			return err
		}, "dest"},
		{"verify without id", func() error {
			_, err := bk.VerifyBackup(ctx, &sundialv1.VerifyBackupRequest{Dest: "file:///b"})
			return err
		}, "backup_id"},
		{"delete of a bad id", func() error {
			_, err := bk.DeleteBackup(ctx, &sundialv1.DeleteBackupRequest{Dest: "file:///b", BackupId: "x"})
			return err
		}, "backup_id"},
		{"restore without src", func() error { _, err := restore(t, conn, ""); return err }, "src"},
		{"schedule more often than a minute", func() error {
			_, err := bk.SetBackupSchedule(ctx, &sundialv1.SetBackupScheduleRequest{Schedule: &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: 1000}})
			return err
		}, "schedule.every_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, restores := leader.backups.calls.Load(), leader.backups.restores.Load()
			err := tc.call()
			vs := apierr.Violations(err)
			if status.Code(err) != codes.InvalidArgument || len(vs) != 1 || vs[0].Field != tc.field {
				t.Fatalf("%s = %v (violations %v), want InvalidArgument on %s", tc.name, err, vs, tc.field)
			}
			if leader.backups.calls.Load() != calls || leader.backups.restores.Load() != restores {
				t.Errorf("%s reached a broker", tc.name)
			}
		})
	}
}

// The /v1/backups routes are served over HTTP/JSON.
func TestBackupsOverHTTP(t *testing.T) {
	srv, _, _ := startCluster(t)
	for _, tc := range []struct {
		name, method, path, body string
		wantCode                 int
		want                     string
	}{
		{"list", http.MethodGet, "/v1/backups?dest=" + url.QueryEscape("file:///backups"), "", http.StatusOK, `"unfinished":["20300102T000000Z-000001"]`},
		{"list of a relative path", http.MethodGet, "/v1/backups?dest=" + url.QueryEscape("file://backups"), "", http.StatusBadRequest, `"field":"dest"`},
		{"create", http.MethodPost, "/v1/backups", `{"dest":"file:///backups"}`, http.StatusOK, `"status":"BACKUP_STATUS_RUNNING"`},
		{"run", http.MethodGet, "/v1/backups/runs/" + testBackupID, "", http.StatusOK, `"id":"` + testBackupID + `"`},
		{"verify", http.MethodPost, "/v1/backups/" + testBackupID + ":verify", `{"dest":"file:///backups"}`, http.StatusOK, `"chain":["` + testBackupID + `"]`},
		{"delete", http.MethodPost, "/v1/backups/" + testBackupID + ":delete", `{"dest":"file:///backups"}`, http.StatusOK, `"files":6`},
		{"schedule", http.MethodGet, "/v1/backups/schedule", "", http.StatusOK, `"lastRunId":"` + testBackupID + `"`},
		{"set schedule", http.MethodPut, "/v1/backups/schedule", `{"schedule":{"dest":"file:///backups","everyMs":"3600000"}}`, http.StatusOK, `"nextAtUnixMs":"1893456000000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			contentType := ""
			if tc.body != "" {
				contentType = "application/json"
			}
			code, body := do(t, srv, tc.method, tc.path, contentType, tc.body, nil)
			if code != tc.wantCode || !strings.Contains(strings.ReplaceAll(body, " ", ""), tc.want) {
				t.Errorf("%s %s = %d %s, want %d holding %s", tc.method, tc.path, code, body, tc.wantCode, tc.want)
			}
		})
	}
}

// POST /v1/backups/{backup_id}:restore answers the progress frames as
// newline-delimited JSON; an error after a frame is its last line, one
// before any frame an error answer as any route's.
func TestRestoreOverHTTP(t *testing.T) {
	srv, leader, _ := startCluster(t)
	lines := func(body string) []string { return strings.Split(strings.TrimSuffix(body, "\n"), "\n") }
	for _, tc := range []struct {
		name, path, body string
		wantCode         int
		wantLines        []string // a part of each line
	}{
		{"newest", "/v1/backups/:restore", `{"src":"file:///backups"}`, http.StatusOK,
			[]string{`{"result":{"phase":"verify"`, `"phase":"shards"`, `"phase":"shards"`, `"phase":"catalog"`, `"clusterId":"c0ffee"`}},
		{"error after a frame", "/v1/backups/" + testBackupID + ":restore", `{"src":"` + brokenSrc + `"}`, http.StatusOK,
			[]string{`"phase":"verify"`, `{"error":{"code":15,"message":"shard-2.sdb: truncated at byte 100 of 4096"`}},
		{"no src", "/v1/backups/:restore", `{}`, http.StatusBadRequest, []string{`"field":"src"`}},
		{"bad id", "/v1/backups/latest:restore", `{"src":"file:///backups"}`, http.StatusBadRequest, []string{`"field":"backup_id"`}},
		{"unknown field", "/v1/backups/:restore", `{"src":"file:///backups","force":true}`, http.StatusBadRequest, []string{"request does not decode"}},
		{"query", "/v1/backups/:restore?src=file:///backups", `{}`, http.StatusBadRequest, []string{"takes its fields in the body"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, srv, http.MethodPost, tc.path, "application/json", tc.body, nil)
			got := lines(body)
			if code != tc.wantCode || len(got) != len(tc.wantLines) {
				t.Fatalf("POST %s %s = %d with %d lines %q, want %d with %d", tc.path, tc.body, code, len(got), body, tc.wantCode, len(tc.wantLines))
			}
			for i, want := range tc.wantLines {
				// protojson puts spaces at random between fields.
				if !strings.Contains(strings.ReplaceAll(got[i], " ", ""), strings.ReplaceAll(want, " ", "")) {
					t.Errorf("POST %s line %d = %s, want it to hold %s", tc.path, i, got[i], want)
				}
			}
		})
	}
	if got := leader.backups.restored.Load(); got.GetBackupId() != testBackupID || got.GetSrc() != brokenSrc {
		t.Errorf("the broker got %v from POST /v1/backups/%s:restore, want the path's id and the body's src", got, testBackupID)
	}
}
