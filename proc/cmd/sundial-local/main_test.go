package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// The test binary doubles as the servers: linked as sundial-broker and
// sundial-proxy in a bin dir, it serves /readyz on the HTTP address it is
// given and runs until SIGTERM.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "sundial-broker", "sundial-proxy":
		os.Exit(fakeServer(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// exitEnv names the fake server that exits at once instead of serving; a
// fake broker whose data dir holds giveUpFile does too.
const (
	exitEnv    = "SUNDIAL_LOCAL_TEST_EXIT"
	giveUpFile = "give-up"
)

// clusterEnv names the file the fake proxy answers GET /v1/cluster with
// (404 while it does not exist).
const clusterEnv = "SUNDIAL_LOCAL_TEST_CLUSTER"

func fakeServer(args []string) int {
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i += 2 {
		flags[args[i]] = args[i+1]
	}
	name, httpAddr := "proxy", flags["--http-addr"]
	if id, ok := flags["--node-id"]; ok {
		name, httpAddr = "broker-"+id, flags["--metrics-addr"]
	}
	_, giveUp := os.Stat(filepath.Join(flags["--data-dir"], giveUpFile))
	if os.Getenv(exitEnv) == name || (flags["--data-dir"] != "" && giveUp == nil) {
		fmt.Println("fake", name, "gives up")
		return 3
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	l, err := net.Listen("tcp", httpAddr)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/v1/cluster", func(w http.ResponseWriter, _ *http.Request) {
		b, err := os.ReadFile(os.Getenv(clusterEnv))
		if err != nil {
			http.NotFound(w, nil)
			return
		}
		_, _ = w.Write(b)
	})
	go func() { _ = http.Serve(l, mux) }()
	fmt.Println("fake", name, "serving", httpAddr)
	<-term
	return 0
}

// syncBuffer is run's output, read while run writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is a cluster of n fake brokers on ports from proc.FreeAddr.
func testConfig(t *testing.T, n int) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, name := range []string{"sundial-broker", "sundial-proxy"} {
		if err := os.Symlink(exe, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	addr := func() string {
		a, err := proc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	l := Layout{ProxyGRPC: addr(), ProxyHTTP: addr(), ProxyAdmin: addr()}
	for range n {
		l.Brokers = append(l.Brokers, BrokerAddrs{GRPC: addr(), Raft: addr(), Metrics: addr()})
	}
	return Config{Brokers: n, Shards: 4, LogLevel: "info", DataDir: filepath.Join(t.TempDir(), "local"),
		StartTimeout: 2 * time.Minute, BinDir: bin, Layout: l}
}

// pids reads the pid file run keeps.
func pids(t *testing.T, cfg Config) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, "run.pids"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			pid, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("run.pids line %q: %v", line, err)
			}
			out = append(out, pid)
		}
	}
	return out
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestRunStartsWaitsPrintsAndStops(t *testing.T) {
	cfg := testConfig(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, &out) }()

	if err := proc.Poll(2*time.Minute, func() error {
		if !strings.Contains(out.String(), "Sundial is up") {
			return fmt.Errorf("not up yet; output:\n%s", out.String())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	started := pids(t, cfg)
	if len(started) != 4 {
		t.Fatalf("run.pids lists %d processes, want 3 brokers and the proxy", len(started))
	}
	for _, pid := range started {
		if !alive(pid) {
			t.Fatalf("pid %d of run.pids is not running", pid)
		}
	}
	for i, b := range cfg.Layout.Brokers {
		want := fmt.Sprintf("broker-%d  gRPC %s   metrics http://%s/metrics   raft %s", i+1, b.GRPC, b.Metrics, b.Raft)
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if want := "admin UI  http://" + cfg.Layout.ProxyHTTP + "/ui/"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "proxy     gRPC "+cfg.Layout.ProxyGRPC) {
		t.Errorf("output lacks the proxy's endpoints:\n%s", out.String())
	}
	if want := "docs http://" + cfg.Layout.ProxyHTTP + "/docs"; !strings.Contains(out.String(), want) {
		t.Errorf("output lacks the API docs URL %q:\n%s", want, out.String())
	}

	cancel() // what Ctrl-C does
	if err := <-done; err != nil {
		t.Fatalf("run() after cancel = %v, want nil", err)
	}
	for _, pid := range started {
		if alive(pid) {
			t.Errorf("pid %d still runs after run returned", pid)
		}
	}
	if left := pids(t, cfg); len(left) != 0 {
		t.Errorf("run.pids lists %v after the stop, want none", left)
	}
}

func TestRunStopsTheOthersWhenOneExitsDuringTheStart(t *testing.T) {
	t.Setenv(exitEnv, "broker-2")
	cfg := testConfig(t, 3)
	var out syncBuffer
	err := run(context.Background(), cfg, &out)
	if err == nil {
		t.Fatal("run() with a broker that exits = nil, want an error")
	}
	if !strings.Contains(out.String(), "fake broker-2 gives up") {
		t.Errorf("output lacks the exited broker's log tail:\n%s", out.String())
	}
	// Every other process was stopped by its pid.
	for _, name := range []string{"broker-1", "broker-3", "proxy"} {
		var pid int
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "started "+name+" (pid "); ok {
				pid, _ = strconv.Atoi(rest[:strings.Index(rest, ")")])
			}
		}
		if pid == 0 {
			t.Fatalf("output does not say %s started:\n%s", name, out.String())
		}
		if !strings.Contains(out.String(), fmt.Sprintf("stopping %s (pid %d)", name, pid)) {
			t.Errorf("output does not say %s (pid %d) was stopped:\n%s", name, pid, out.String())
		}
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs after run returned", name, pid)
		}
	}
}

// startedPid is the pid the output last says name started with.
func startedPid(t *testing.T, out, name string) int {
	t.Helper()
	pid := 0
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "started "+name+" (pid "); ok {
			pid, _ = strconv.Atoi(rest[:strings.Index(rest, ")")])
		}
	}
	if pid == 0 {
		t.Fatalf("output does not say %s started:\n%s", name, out)
	}
	return pid
}

func TestRunKeepsTheOthersWhenABrokerDiesAndRestartsIt(t *testing.T) {
	cfg := testConfig(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, &out) }()
	waitOutput := func(want string) {
		t.Helper()
		if err := proc.Poll(2*time.Minute, func() error {
			if !strings.Contains(out.String(), want) {
				return fmt.Errorf("output lacks %q:\n%s", want, out.String())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitOutput("Sundial is up")
	if err := runRestart(ctx, cfg, "2", &syncBuffer{}); err == nil || !strings.Contains(err.Error(), "broker-2 is running") {
		t.Fatalf("runRestart(2) while broker-2 runs = %v, want a refusal", err)
	}

	dead := startedPid(t, out.String(), "broker-2")
	if err := syscall.Kill(dead, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(fmt.Sprintf("broker-2 (pid %d) exited (signal: killed); its log is %s", dead, filepath.Join(cfg.DataDir, "logs", "broker-2.log")))
	waitOutput("make restart-broker N=2")
	select {
	case err := <-done:
		t.Fatalf("run() returned %v after broker-2 died, want it to keep running", err)
	default:
	}
	for _, name := range []string{"broker-1", "broker-3", "proxy"} {
		if pid := startedPid(t, out.String(), name); !alive(pid) {
			t.Errorf("%s (pid %d) does not run after broker-2 died", name, pid)
		}
	}
	if got := pids(t, cfg); len(got) != 3 {
		t.Errorf("run.pids lists %v after broker-2 died, want the 3 running processes", got)
	}

	var restartOut syncBuffer
	if err := runRestart(ctx, cfg, "broker-2", &restartOut); err != nil {
		t.Fatalf("runRestart(broker-2) = %v; output:\n%s", err, restartOut.String())
	}
	if !strings.Contains(restartOut.String(), "broker-2 is ready") {
		t.Errorf("restart output lacks the readiness:\n%s", restartOut.String())
	}
	restarted := startedPid(t, out.String(), "broker-2")
	if restarted == dead || !alive(restarted) {
		t.Fatalf("broker-2 after the restart: pid %d (was %d), alive %v", restarted, dead, alive(restarted))
	}
	if got := pids(t, cfg); len(got) != 4 {
		t.Errorf("run.pids lists %v after the restart, want 4 processes", got)
	}
	if err := runRestart(ctx, cfg, "7", &syncBuffer{}); err == nil || !strings.Contains(err.Error(), "not a broker of this 'make run'") {
		t.Errorf("runRestart(7) = %v, want 'not a broker of this make run'", err)
	}

	running := pids(t, cfg)
	cancel() // what Ctrl-C does
	if err := <-done; err != nil {
		t.Fatalf("run() after cancel = %v, want nil", err)
	}
	for _, pid := range running {
		if alive(pid) {
			t.Errorf("pid %d still runs after run returned", pid)
		}
	}
	if err := runRestart(context.Background(), cfg, "2", &syncBuffer{}); err == nil || !strings.Contains(err.Error(), "no 'make run' is running") {
		t.Errorf("runRestart(2) with no run = %v, want 'no make run is running'", err)
	}
}

func TestProcessName(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{"2", "broker-2", ""}, {"broker-12", "broker-12", ""}, {"proxy", "proxy", ""},
		{"0", "", "restart takes a broker number"}, {"meta", "", "restart takes a broker number"},
	} {
		got, err := processName(tc.in)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("processName(%q) = %q, %v, want %q, %q", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRunRefusesAnotherMemberList(t *testing.T) {
	cfg := testConfig(t, 3)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "cluster-members"), []byte("1=127.0.0.1:1@127.0.0.1:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), cfg, &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "holds a cluster with members") {
		t.Fatalf("run() on another cluster's data = %v, want a refusal naming the members", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "run.pids")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run.pids exists after a refusal (%v): something was started", err)
	}
}

func TestRunRefusesBusyPorts(t *testing.T) {
	cfg := testConfig(t, 1)
	l, err := net.Listen("tcp", cfg.Layout.ProxyHTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = run(context.Background(), cfg, &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "already in use: "+cfg.Layout.ProxyHTTP) {
		t.Fatalf("run() with the proxy's HTTP port taken = %v, want 'already in use'", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    func(Config) string // "" when cfg is right
		wantErr string
	}{
		{name: "defaults", env: nil, want: func(c Config) string {
			if c.Brokers != 3 || c.Shards != 8 || c.LogLevel != "info" || c.StartTimeout != 60*time.Second ||
				c.DataDir != filepath.Join("data", "local") || c.Layout.ProxyGRPC != "127.0.0.1:7400" ||
				c.Layout.ProxyHTTP != "127.0.0.1:7480" || len(c.Layout.Brokers) != 3 ||
				c.Layout.Brokers[2] != (BrokerAddrs{GRPC: "127.0.0.1:7503", Raft: "127.0.0.1:7603", Metrics: "127.0.0.1:7703", Admin: "127.0.0.1:7803"}) {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
		{name: "one broker keeps its own dir", env: map[string]string{"SUNDIAL_BROKERS": "1"}, want: func(c Config) string {
			if c.Brokers != 1 || c.DataDir != filepath.Join("data", "local-1") || len(c.Layout.Brokers) != 1 {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
		{name: "explicit dir and timeout", env: map[string]string{"SUNDIAL_LOCAL_DIR": "/tmp/x", "SUNDIAL_START_TIMEOUT": "5", "SUNDIAL_LOG_LEVEL": "debug"}, want: func(c Config) string {
			if c.DataDir != "/tmp/x" || c.StartTimeout != 5*time.Second || c.LogLevel != "debug" {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
		{name: "secure keeps its own dir", env: map[string]string{"SUNDIAL_SECURE": "1", "SUNDIAL_BROKERS": "1"}, want: func(c Config) string {
			if !c.Secure || c.DataDir != filepath.Join("data", "local-1-secure") {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
		{name: "secure not 0 or 1", env: map[string]string{"SUNDIAL_SECURE": "yes"}, wantErr: "SUNDIAL_SECURE must be 1 or 0"},
		{name: "ten brokers", env: map[string]string{"SUNDIAL_BROKERS": "10"}, wantErr: "SUNDIAL_BROKERS must be a number in 1..9"},
		{name: "shards not a number", env: map[string]string{"SUNDIAL_SHARDS": "many"}, wantErr: "SUNDIAL_SHARDS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := configFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("configFromEnv(%v) error = %v, want %q", tt.env, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("configFromEnv(%v) error = %v", tt.env, err)
			}
			if bad := tt.want(cfg); bad != "" {
				t.Fatalf("configFromEnv(%v) = %s", tt.env, bad)
			}
		})
	}
}
