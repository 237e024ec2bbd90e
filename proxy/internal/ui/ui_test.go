package ui

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestBuildChart(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 30, 15, 0, time.UTC)
	req := histogramRequest("t", "", "hour", now)
	if want := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC).UnixMilli(); req.FromUnixMs != want || req.ToUnixMs != want+60*60_000 {
		t.Fatalf("histogramRequest(hour) = [%d, %d), want [%d, +1h)", req.FromUnixMs, req.ToUnixMs, want)
	}
	c := buildChart(req, []*sundialv1.HistogramCount{
		{StartUnixMs: req.FromUnixMs, Count: 4},
		{StartUnixMs: req.FromUnixMs + 10*60_000, Count: 1},
	})
	if len(c.Bars) != 60 || c.Total != 5 || c.Max != 4 {
		t.Fatalf("buildChart() = %d bars, total %d, max %d, want 60, 5, 4", len(c.Bars), c.Total, c.Max)
	}
	full := float64(c.Bottom - c.Top)
	if c.Bars[0].H != full || c.Bars[10].H != full/4 || c.Bars[1].H != 0 {
		t.Errorf("bar heights = %v, %v, %v, want %v, %v, 0", c.Bars[0].H, c.Bars[10].H, c.Bars[1].H, full, full/4)
	}
	if c.Bars[10].Label != "10:40 UTC: 1 messages" {
		t.Errorf("bar 10 label = %q", c.Bars[10].Label)
	}
	week := histogramRequest("t", "", "week", now)
	if week.Bucket != sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR || (week.ToUnixMs-week.FromUnixMs)/3_600_000 != 168 {
		t.Errorf("histogramRequest(week) = %v", week)
	}
}

func TestViewPayload(t *testing.T) {
	tests := []struct {
		name, view string
		in         []byte
		want, note string
	}{
		{"text", "text", []byte("héllo"), "héllo", ""},
		{"json indented", "json", []byte(`{"a":[1,2]}`), "{\n  \"a\": [\n    1,\n    2\n  ]\n}", ""},
		{"bad json as hex", "json", []byte("{"), "00000000  7b", "not valid JSON; shown as hex"},
		{"binary as hex", "text", []byte{0xff, 0x00}, "00000000  ff 00", "not UTF-8 text; shown as hex"},
		{"hex", "hex", []byte("ab"), "00000000  61 62", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := viewPayload(tt.in, tt.view)
			if !strings.HasPrefix(got.Text, tt.want) || got.Note != tt.note {
				t.Errorf("viewPayload(%q, %s) = %q (note %q), want %q (note %q)", tt.in, tt.view, got.Text, got.Note, tt.want, tt.note)
			}
		})
	}
	// A long text cut inside a rune stays text.
	long := []byte(strings.Repeat("a", maxPayloadShown-1) + "é")
	if got := viewPayload(long, "text"); !got.Truncated || got.Note != "" || len(got.Text) != maxPayloadShown-1 {
		t.Errorf("viewPayload(long) truncated %v note %q len %d", got.Truncated, got.Note, len(got.Text))
	}
}

func TestParseInputs(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	if got, err := parseWhen("from", "-10s", now); err != nil || got != 990_000 {
		t.Errorf("parseWhen(-10s) = %d, %v", got, err)
	}
	if got, err := parseWhen("from", "1970-01-01T00:00:02Z", now); err != nil || got != 2000 {
		t.Errorf("parseWhen(RFC 3339) = %d, %v", got, err)
	}
	if _, err := parseWhen("to", "soon", now); err == nil || err.Fields[0].Field != "to" {
		t.Errorf("parseWhen(soon) error = %v, want one naming to", err)
	}
	for in, want := range map[string]time.Duration{"": 0, "90": 90 * time.Second, "2h": 2 * time.Hour} {
		if got, err := parseDelay("delay", in); err != nil || got != want {
			t.Errorf("parseDelay(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	if _, err := parseDelay("delay", "later"); err == nil {
		t.Errorf("parseDelay(later) error = nil")
	}
	if h, err := parseHeaders("a=1\n\n b = 2 \n"); err != nil || h["a"] != "1" || h["b"] != "2" {
		t.Errorf("parseHeaders() = %v, %v", h, err)
	}
}

func TestHTTPStatus(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.InvalidArgument: 400, codes.NotFound: 404, codes.AlreadyExists: 409, codes.FailedPrecondition: 409,
		codes.ResourceExhausted: 429, codes.Unavailable: 503, codes.Internal: 500, codes.Unknown: 500,
	} {
		if got := httpStatus(c); got != want {
			t.Errorf("httpStatus(%v) = %d, want %d", c, got, want)
		}
	}
}

// TestCrossOriginPostRefused: a POST from another site is refused before
// any API call (the API here is empty and would panic if reached).
func TestCrossOriginPostRefused(t *testing.T) {
	h := New(API{}, nil, Options{})
	for _, path := range []string{"/ui/topics/t/purge", "/ui/cluster/backup-now", "/ui/cluster/backup-schedule", "/ui/cluster/clear-backup-schedule"} {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader("confirm=yes&dest=file:///b&every=1h"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "cross-origin request refused") {
			t.Errorf("cross-site POST %s = %d %s, want 403 with the reason", path, rec.Code, rec.Body)
		}
	}
}

func TestSpans(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		out  string // formatSpan of want
	}{
		{"90s", 90 * time.Second, "1m30s"},
		{"1h", time.Hour, "1h"},
		{"24h", 24 * time.Hour, "1d"},
		{"7d", 7 * 24 * time.Hour, "7d"},
		{"1d12h", 36 * time.Hour, "1d12h"},
		{"1h30m", 90 * time.Minute, "1h30m"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSpan(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("parseSpan(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
			}
			if out := formatSpan(got.Milliseconds(), "-"); out != tt.out {
				t.Errorf("formatSpan(%v) = %q, want %q", got, out, tt.out)
			}
		})
	}
	for _, in := range []string{"abc", "d", "1.5d", "7days", "-d"} {
		if got, err := parseSpan(in); err == nil {
			t.Errorf("parseSpan(%q) = %v, want an error", in, got)
		}
	}
	if got := formatSpan(0, "all"); got != "all" {
		t.Errorf("formatSpan(0) = %q, want the none text", got)
	}
}

func TestScheduleOf(t *testing.T) {
	tests := []struct {
		name      string
		form      url.Values
		want      *sundialv1.BackupSchedule
		badFields []string
	}{
		{"all set", url.Values{"dest": {" file:///b "}, "every": {"1h"}, "full_every": {"24h"}, "keep": {"7d"}},
			&sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: 3_600_000, FullEveryMs: 86_400_000, KeepMs: 604_800_000}, nil},
		{"every only", url.Values{"dest": {"file:///b"}, "every": {"90m"}}, &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: 5_400_000}, nil},
		// dest is the API's to check.
		{"no dest", url.Values{"every": {"1h"}}, &sundialv1.BackupSchedule{EveryMs: 3_600_000}, nil},
		// An empty every would clear the schedule: refused.
		{"no every", url.Values{"dest": {"file:///b"}}, nil, []string{"every"}},
		{"every abc", url.Values{"dest": {"file:///b"}, "every": {"abc"}}, nil, []string{"every"}},
		{"every bad, keep negative", url.Values{"every": {"x"}, "full_every": {"1h"}, "keep": {"-1h"}}, nil, []string{"every", "keep"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := scheduleOf(tt.form)
			if tt.badFields == nil {
				if err != nil || !proto.Equal(got, tt.want) {
					t.Fatalf("scheduleOf(%v) = %v, %v, want %v", tt.form, got, err, tt.want)
				}
				return
			}
			var ae *apiError
			if !errors.As(err, &ae) || ae.HTTPStatus != http.StatusBadRequest {
				t.Fatalf("scheduleOf(%v) error = %v, want a 400 apiError", tt.form, err)
			}
			var fields []string
			for _, f := range ae.Fields {
				fields = append(fields, f.Field)
			}
			if !slices.Equal(fields, tt.badFields) {
				t.Errorf("scheduleOf(%v) bad fields = %v, want %v", tt.form, fields, tt.badFields)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 40: "3.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// fakeClients answer the cluster page's reads; every other method of
// the embedded (nil) interfaces would panic.
type fakeClients struct {
	sundialv1.AdminClient
	sundialv1.ClusterClient
	sundialv1.BackupsClient
	runs        []*sundialv1.BackupRun
	schedule    *sundialv1.BackupSchedule
	scheduleErr error
}

func (f *fakeClients) GetClusterInfo(context.Context, *sundialv1.GetClusterInfoRequest, ...grpc.CallOption) (*sundialv1.ClusterInfo, error) {
	return &sundialv1.ClusterInfo{RoutingVersion: 7, Nodes: []*sundialv1.Node{{NodeId: 1}}}, nil
}

func (f *fakeClients) ListOperations(context.Context, *sundialv1.ListOperationsRequest, ...grpc.CallOption) (*sundialv1.ListOperationsResponse, error) {
	return &sundialv1.ListOperationsResponse{}, nil
}

func (f *fakeClients) ListBackupRuns(context.Context, *sundialv1.ListBackupRunsRequest, ...grpc.CallOption) (*sundialv1.ListBackupRunsResponse, error) {
	return &sundialv1.ListBackupRunsResponse{Runs: f.runs}, nil
}

func (f *fakeClients) GetBackupSchedule(context.Context, *sundialv1.GetBackupScheduleRequest, ...grpc.CallOption) (*sundialv1.BackupSchedule, error) {
	return f.schedule, f.scheduleErr
}

// TestClusterPageBackups renders the Backups section from fake answers:
// a running, a failed and a done run; the schedule, or its read's error
// alone when it fails.
func TestClusterPageBackups(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	f := &fakeClients{
		runs: []*sundialv1.BackupRun{
			{Id: "20300101T115900Z-000003", Kind: "incremental", Parent: "20300101T110000Z-000002", Dest: "file:///b", Status: sundialv1.BackupStatus_BACKUP_STATUS_RUNNING, StartedAtUnixMs: at(-time.Minute), ShardsTotal: 4, ShardsDone: 1, Bytes: 2048, Scheduled: true},
			{Id: "20300101T110000Z-000002", Kind: "full", Dest: "file:///b", Status: sundialv1.BackupStatus_BACKUP_STATUS_FAILED, Error: "shard 3: <disk full>", StartedAtUnixMs: at(-time.Hour), FinishedAtUnixMs: at(-time.Hour + 90*time.Second), ShardsTotal: 4, ShardsDone: 2},
			{Id: "20300101T100000Z-000001", Kind: "full", Dest: "file:///b", Status: sundialv1.BackupStatus_BACKUP_STATUS_DONE, StartedAtUnixMs: at(-2 * time.Hour), FinishedAtUnixMs: at(-2*time.Hour + 1500*time.Millisecond), ShardsTotal: 4, ShardsDone: 4, Bytes: 3 << 20},
		},
		schedule: &sundialv1.BackupSchedule{Dest: "file:///b", EveryMs: 3_600_000, FullEveryMs: 86_400_000, NextAtUnixMs: at(59 * time.Minute), LastRunId: "20300101T115900Z-000003"},
	}
	h := New(API{Admin: f, Cluster: f, Backups: f}, nil, Options{})
	h.now = func() time.Time { return now }
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/cluster", nil))
		return rec.Code, rec.Body.String()
	}
	code, body := get()
	if code != http.StatusOK {
		t.Fatalf("GET /ui/cluster = %d: %s", code, body)
	}
	for _, want := range []string{
		`<tr data-id="20300101T115900Z-000003">`, `<td class="status-RUNNING">RUNNING</td>`, "1m0s so far", `<td class="num shards">1/4</td>`, "2.0 KiB", "<small>scheduled</small>", "on <code>20300101T110000Z-000002</code>",
		`<td class="status-FAILED">FAILED</td>`, "1m30s", "shard 3: &lt;disk full&gt;",
		`<td class="status-DONE">DONE</td>`, "<td>2s</td>", "3.0 MiB",
		// The schedule, its next run and its last run's status.
		`<td><code>file:///b</code></td><td>1h</td><td>1d</td><td>all</td>`, "in 59m0s", `<code>20300101T115900Z-000003</code> <span class="status-RUNNING">`,
		// The forms hold the schedule; clearing it is offered.
		`name="every" value="1h"`, `name="full_every" value="1d"`, `name="keep" value=""`, `id="clear-backup-schedule"`, "shardctl backup restore",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("cluster page lacks %s", want)
		}
	}

	f.schedule, f.scheduleErr = nil, status.Error(codes.PermissionDenied, "token lacks admin")
	code, body = get()
	if code != http.StatusOK || !strings.Contains(body, `id="backup-schedule-error"`) || !strings.Contains(body, "PermissionDenied") || !strings.Contains(body, `id="nodes"`) || !strings.Contains(body, `id="backup-runs"`) {
		t.Errorf("GET /ui/cluster with GetBackupSchedule failing = %d, want 200 with the error in the section, the rest shown: %s", code, body)
	}
	if strings.Contains(body, `id="clear-backup-schedule"`) {
		t.Errorf("clearing is offered with no schedule known")
	}
}
