package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/sundialmq/sundial/loadtest/internal/target"
)

func TestParseFsync(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want fsyncSample
	}{
		{"counter and histogram, series summed", `# HELP sundial_broker_raft_log_fsyncs_total Raft log fsyncs.
# TYPE sundial_broker_raft_log_fsyncs_total counter
sundial_broker_raft_log_fsyncs_total{shard="1"} 10
sundial_broker_raft_log_fsyncs_total{shard="2"} 5
sundial_broker_raft_log_fsync_duration_seconds_bucket{le="0.001"} 3
sundial_broker_raft_log_fsync_duration_seconds_sum 0.03
sundial_broker_raft_log_fsync_duration_seconds_count 15
sundial_broker_raft_log_fsyncs_total_other 99
`, fsyncSample{fsyncs: 15, hasCount: true, sum: 0.03, count: 15, hasHist: true}},
		{"counter only, a label value with spaces and braces", `sundial_broker_raft_log_fsyncs_total{path="a }b"} 7 1700000000000
`, fsyncSample{fsyncs: 7, hasCount: true}},
		{"neither (an older broker)", "sundial_broker_raft_proposals_total 3\n", fsyncSample{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFsync(strings.NewReader(tc.text))
			if err != nil || got != tc.want {
				t.Fatalf("parseFsync() = %+v, %v, want %+v, nil", got, err, tc.want)
			}
		})
	}
}

// fakeBroker serves a fixed CPU profile on /debug/pprof/profile and, when
// fsyncs, fsync metrics that grow by 10 fsyncs of 2 ms at every scrape.
type fakeBroker struct {
	fsyncs bool
	prof   []byte

	mu      sync.Mutex // guards the fields below
	scrapes int
	queries []string
}

func (f *fakeBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/debug/pprof/profile":
		f.queries = append(f.queries, r.URL.RawQuery)
		_, _ = w.Write(f.prof)
	case "/metrics":
		f.scrapes++
		if f.fsyncs {
			n := 10 * f.scrapes
			fmt.Fprintf(w, "%s %d\n%s_sum %g\n%s_count %d\n", FsyncsMetric, n, FsyncSecondsMetric, 0.002*float64(n), FsyncSecondsMetric, n)
		}
	default:
		http.NotFound(w, r)
	}
}

func encodedProfile(t *testing.T, samples ...stackSample) []byte {
	t.Helper()
	var sb strings.Builder
	if err := cpuProfile(samples...).Write(&sb); err != nil {
		t.Fatalf("Profile.Write() error = %v", err)
	}
	return []byte(sb.String())
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestWindowProbe(t *testing.T) {
	apply := encodedProfile(t, stackSample{[]string{"github.com/sundialmq/sundial/broker/internal/fsm.(*StateMachine).Update"}, 30_000_000},
		stackSample{[]string{"runtime.gcBgMarkWorker"}, 10_000_000})
	// broker-1 is this test process's own profiler, as a broker serves it.
	realMux := http.NewServeMux()
	realMux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	metrics1 := &fakeBroker{fsyncs: true}
	realMux.Handle("/metrics", metrics1)
	b2 := &fakeBroker{fsyncs: true, prof: apply}
	proxy := &fakeBroker{prof: apply}
	eps := []target.Endpoint{
		{Role: target.RoleBrokers, Name: "broker-1", Addr: serve(t, realMux)},
		{Role: target.RoleBrokers, Name: "broker-2", Addr: serve(t, b2)},
		{Role: target.RoleProxy, Name: "proxy", Addr: serve(t, proxy)},
	}
	dir := t.TempDir()
	w := newWindowProbe(context.Background(), "publish", eps)
	w.window(true)
	w.window(true) // a second begin is ignored
	w.window(false)
	res := w.result(func(float64) uint64 { return 1000 }, dir, "throughput-sundial")

	if res.Error != "" || len(res.Warnings) != 0 {
		t.Fatalf("result() error %q, warnings %q, want none", res.Error, res.Warnings)
	}
	for _, p := range res.Processes {
		if p.CPU == nil {
			t.Errorf("result() process %s has no CPU: %s", p.Name, p.Error)
		}
		path := filepath.Join(dir, "throughput-sundial-"+p.Name+".pprof")
		f, err := os.Open(path)
		if err != nil {
			t.Errorf("profile of %s not kept: %v", p.Name, err)
			continue
		}
		if _, err := profile.Parse(f); err != nil {
			t.Errorf("profile.Parse(%s) error = %v", path, err)
		}
		f.Close()
	}
	if got := b2.queries; len(got) == 0 || got[0] != "seconds=1" {
		t.Errorf("profile requests = %q, want seconds=1 each", got)
	}
	brokers, px := res.role(target.RoleBrokers), res.role(target.RoleProxy)
	if brokers == nil || brokers.Processes != 2 || brokers.CPU == nil || px == nil || px.CPU == nil {
		t.Fatalf("result() roles = %+v, want brokers (2) and proxy with CPU", res.Roles)
	}
	if got, want := px.CPU.Share(CatApply), 0.75; math.Abs(got-want) > 1e-9 {
		t.Errorf("proxy apply share = %v, want %v (one chunk of the served profile)", got, want)
	}
	if brokers.CPU.Seconds < 0.04*float64(len(b2.queries))-1e-9 {
		t.Errorf("brokers CPU = %v s, want at least broker-2's %d × 0.04 s", brokers.CPU.Seconds, len(b2.queries))
	}
	if f := res.Fsync; f == nil || f.Brokers != 2 || f.Count != 20 || f.PerMillion != 20000 || math.Abs(f.MeanSeconds-0.002) > 1e-12 {
		t.Errorf("result() fsync = %+v (%s), want 2 brokers, 20 fsyncs, 20000 per 1M msgs, mean 2 ms", res.Fsync, res.FsyncError)
	}
}

func TestWindowProbeDegrades(t *testing.T) {
	prof := encodedProfile(t, stackSample{[]string{"main.main"}, 10_000_000})
	old := &fakeBroker{prof: prof} // serves no fsync metrics
	eps := []target.Endpoint{
		{Role: target.RoleBrokers, Name: "broker-1", Addr: serve(t, old)},
		{Role: target.RoleProxy, Name: "proxy", Addr: serve(t, http.NotFoundHandler())},
	}
	t.Run("a failed fetch and a missing metric", func(t *testing.T) {
		w := newWindowProbe(context.Background(), "drain", eps)
		w.window(true)
		w.window(false)
		res := w.result(func(float64) uint64 { return 10 }, "", "burst-sundial")
		if px := res.role(target.RoleProxy); px == nil || px.CPU != nil {
			t.Errorf("proxy role = %+v, want one without CPU (its fetch failed)", px)
		}
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "proxy profile") || !strings.Contains(res.Warnings[0], "404") {
			t.Errorf("warnings = %q, want one for the proxy's 404", res.Warnings)
		}
		if b := res.role(target.RoleBrokers); b == nil || b.CPU == nil {
			t.Errorf("brokers role = %+v, want CPU", b)
		}
		if res.Fsync != nil || !strings.Contains(res.FsyncError, FsyncsMetric) {
			t.Errorf("fsync = %+v, %q, want none, naming %s", res.Fsync, res.FsyncError, FsyncsMetric)
		}
	})
	t.Run("a window never begun", func(t *testing.T) {
		w := newWindowProbe(context.Background(), "drain", eps)
		w.window(false) // an end without a begin is ignored
		res := w.result(func(float64) uint64 { return 0 }, "", "burst-sundial")
		if res.Error != "the drain window was not seen" || res.Processes != nil {
			t.Errorf("result() = %+v, want only the error that the window was not seen", res)
		}
	})
}
