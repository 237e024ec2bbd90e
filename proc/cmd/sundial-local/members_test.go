package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// writeIdentity writes a broker identity file into dataDir/broker-id.
func writeIdentity(t *testing.T, dataDir string, id int, clusterID string) {
	t.Helper()
	dir := filepath.Join(dataDir, fmt.Sprintf("broker-%d", id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"node_id": %d, "incarnation": "inc-%d", "cluster_id": %q}`, id, id, clusterID)
	if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// withJoinSlots gives the layout of cfg free addresses for brokers up to n,
// so that joined brokers do not take the ports of DESIGN §5.
func withJoinSlots(t *testing.T, cfg *Config, n int) {
	t.Helper()
	for len(cfg.Layout.Brokers) < n {
		var a [3]string
		for i := range a {
			addr, err := proc.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			a[i] = addr
		}
		cfg.Layout.Brokers = append(cfg.Layout.Brokers, BrokerAddrs{GRPC: a[0], Raft: a[1], Metrics: a[2]})
	}
}

// startRun runs cfg until the test ends (or its cancel), and waits for
// "Sundial is up"; it answers the output and the cancel.
func startRun(t *testing.T, cfg Config) (*syncBuffer, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, &out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run() = %v; output:\n%s", err, out.String())
		}
	})
	waitOutputOf(t, &out, "Sundial is up")
	return &out, cancel
}

func waitOutputOf(t *testing.T, out *syncBuffer, want string) {
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

// startArgs is the command line the log of name records for its latest
// start (proc.Start writes it first).
func startArgs(t *testing.T, cfg Config, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.DataDir, "logs", name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "# ") {
			last = line
		}
	}
	return last
}

// After the walkthrough (brokers 4, 5 and 7 joined, broker 6 waited and was
// never added, node 2 removed), a run starts brokers 1, 3, 4, 5 and 7, the
// joined ones with --join naming the other members, and never 2 or 6. Before, it started 1, 2 and 3.
func TestRunStartsWhatTheDataDirHolds(t *testing.T) {
	cfg := testConfig(t, 3)
	withJoinSlots(t, &cfg, 7)
	for _, id := range []int{1, 2, 3, 4, 5, 7} {
		writeIdentity(t, cfg.DataDir, id, "c1")
	}
	writeIdentity(t, cfg.DataDir, 6, "")
	if _, err := recordRemoved(cfg.DataDir, map[int]bool{2: true}); err != nil {
		t.Fatal(err)
	}
	out, _ := startRun(t, cfg)

	for _, name := range []string{"broker-1", "broker-3", "broker-4", "broker-5", "broker-7", "proxy"} {
		if !alive(startedPid(t, out.String(), name)) {
			t.Errorf("%s does not run", name)
		}
	}
	for _, name := range []string{"broker-2", "broker-6"} {
		if strings.Contains(out.String(), "started "+name+" ") {
			t.Errorf("%s was started:\n%s", name, out.String())
		}
	}
	for _, want := range []string{"broker-2: node 2 was removed from the cluster; not started", "broker-6: its data dir", "Sundial is up after"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "(5 broker(s)") {
		t.Errorf("output does not count 5 brokers:\n%s", out.String())
	}
	l := cfg.Layout
	for _, id := range []int{4, 5, 7} {
		var others []string
		for _, o := range []int{1, 3, 4, 5, 7} {
			if o != id {
				others = append(others, l.broker(o).GRPC)
			}
		}
		join := "--join " + strings.Join(others, ",")
		args := startArgs(t, cfg, fmt.Sprintf("broker-%d", id))
		if !strings.Contains(args, join) || strings.Contains(args, "--initial-members") {
			t.Errorf("broker-%d started with %q, want %q and no --initial-members", id, args, join)
		}
	}
	if args := startArgs(t, cfg, "broker-1"); !strings.Contains(args, "--initial-members "+l.members(3)) {
		t.Errorf("broker-1 started with %q, want the bootstrap members", args)
	}
	var brokers []string
	for _, id := range []int{1, 3, 4, 5, 7} {
		brokers = append(brokers, l.broker(id).GRPC)
	}
	if args := startArgs(t, cfg, "proxy"); !strings.Contains(args, "--brokers "+strings.Join(brokers, ",")) {
		t.Errorf("proxy started with %q, want --brokers %s", args, strings.Join(brokers, ","))
	}
}

// A broker that exits after the cluster removed it is reported as removed,
// not with a restart hint that would be refused; the removal is recorded
// for the next run, and a restart request is refused saying why.
func TestRunSaysARemovedBrokerIsNotStartedAgain(t *testing.T) {
	cluster := filepath.Join(t.TempDir(), "cluster.json")
	t.Setenv(clusterEnv, cluster)
	cfg := testConfig(t, 3)
	out, _ := startRun(t, cfg)

	if err := os.WriteFile(cluster, []byte(`{"nodes":[{"nodeId":"1","state":"NODE_STATE_ACTIVE"},{"nodeId":"2","state":"NODE_STATE_REMOVED"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(startedPid(t, out.String(), "broker-2"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutputOf(t, out, "broker-2 was removed from the cluster (shardctl remove-node), so it is not started again")
	if strings.Contains(out.String(), "make restart-broker N=2") {
		t.Errorf("output suggests restarting the removed broker-2:\n%s", out.String())
	}
	removed, err := readRemoved(cfg.DataDir)
	if err != nil || !removed[2] || len(removed) != 1 {
		t.Errorf("recorded removed nodes = %v, %v; want node 2", removed, err)
	}
	err = runRestart(context.Background(), cfg, "2", &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "broker-2 was removed from the cluster") {
		t.Errorf("runRestart(2) of a removed broker = %v, want a refusal saying it was removed", err)
	}
}

// A restart that fails carries the whole error back, log tail included.
// Before, the control socket's client kept its first line only: "log
// tail:" and nothing after it.
func TestRestartErrorCarriesTheLogTail(t *testing.T) {
	cfg := testConfig(t, 3)
	out, _ := startRun(t, cfg)
	dead := startedPid(t, out.String(), "broker-2")
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "broker-2", giveUpFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(dead, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutputOf(t, out, fmt.Sprintf("broker-2 (pid %d) exited", dead))
	err := runRestart(context.Background(), cfg, "2", &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "fake broker-2 gives up") {
		t.Errorf("runRestart(2) of a broker that exits at once = %v, want its log tail", err)
	}
}

// make join finds the cluster that runs: the data directory whose control
// socket answers, sized by its cluster-members.
func TestFindRunningCluster(t *testing.T) {
	root := t.TempDir()
	listen := func(dir, members string) net.Listener {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cluster-members"), []byte(members+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("unix", controlPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	if _, _, found, err := findRunningCluster(root); found || err != nil {
		t.Fatalf("findRunningCluster(nothing runs) = found %v, %v; want not found", found, err)
	}
	// The stopped 3-broker cluster left its directory, without a socket.
	if err := os.MkdirAll(filepath.Join(root, "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	one := listen(filepath.Join(root, "local-1"), DefaultLayout(1).members(1))
	dir, n, found, err := findRunningCluster(root)
	if err != nil || !found || dir != filepath.Join(root, "local-1") || n != 1 {
		t.Fatalf("findRunningCluster = %q, %d, %v, %v; want %s, 1 broker", dir, n, found, err, filepath.Join(root, "local-1"))
	}
	listen(filepath.Join(root, "local-5"), DefaultLayout(5).members(5))
	if _, _, _, err := findRunningCluster(root); err == nil || !strings.Contains(err.Error(), "SUNDIAL_LOCAL_DIR") {
		t.Errorf("findRunningCluster(two run) = %v, want an error naming SUNDIAL_LOCAL_DIR", err)
	}
	_ = one.Close()
	if dir, n, _, _ := findRunningCluster(root); dir != filepath.Join(root, "local-5") || n != 5 {
		t.Errorf("findRunningCluster after local-1 stopped = %q, %d; want local-5, 5", dir, n)
	}
}
