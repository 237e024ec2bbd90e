package integration

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// TestBinariesEndToEnd builds the real binaries, starts three brokers and a
// proxy as processes the way `make run` does, and drives them with shardctl:
// a message published with a 2s delay is consumed after it is due.
func TestBinariesEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bin := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for name, pkg := range map[string]string{
		"sundial-broker": "./broker/cmd/sundial-broker",
		"sundial-proxy":  "./proxy/cmd/sundial-proxy",
		"shardctl":       "./shardctl/cmd/shardctl",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	data := t.TempDir()
	var members []string
	type addrs struct{ raft, grpc, metrics string }
	nodes := make([]addrs, 3)
	for i := range nodes {
		nodes[i] = addrs{freeAddr(t), freeAddr(t), freeAddr(t)}
		members = append(members, fmt.Sprintf("%d=%s@%s", i+1, nodes[i].raft, nodes[i].grpc))
	}
	var brokerAddrs []string
	for i, n := range nodes {
		start(t, filepath.Join(data, fmt.Sprintf("broker-%d.log", i+1)), filepath.Join(bin, "sundial-broker"),
			"--node-id", fmt.Sprint(i+1), "--raft-addr", n.raft, "--grpc-addr", n.grpc, "--metrics-addr", n.metrics, "--admin-addr", "off",
			"--data-dir", filepath.Join(data, fmt.Sprintf("broker-%d", i+1)), "--initial-members", strings.Join(members, ","),
			"--shards", "4", "--log-level", "warn")
		brokerAddrs = append(brokerAddrs, n.grpc)
	}
	proxyGRPC, proxyHTTP := freeAddr(t), freeAddr(t)
	start(t, filepath.Join(data, "proxy.log"), filepath.Join(bin, "sundial-proxy"),
		"--grpc-addr", proxyGRPC, "--http-addr", proxyHTTP, "--brokers", strings.Join(brokerAddrs, ","), "--log-level", "warn")
	waitHealthy(t, "http://"+proxyHTTP+"/healthz")
	for _, n := range nodes {
		waitHealthy(t, "http://"+n.metrics+"/healthz")
	}

	shardctl := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "shardctl"), append([]string{"--proxy", proxyGRPC}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("shardctl %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	// Retry the first publish while the shards elect their first leaders.
	Eventually(t, 30*time.Second, func() error {
		cmd := exec.Command(filepath.Join(bin, "shardctl"), "--proxy", proxyGRPC, "status")
		return cmd.Run()
	})
	published := time.Now()
	out := shardctl("publish", "--topic", "demo", "--delay", "2s", "hello")
	if !strings.Contains(out, "due") && !strings.Contains(out, "DUE") {
		t.Logf("publish output:\n%s", out)
	}
	out = shardctl("consume", "--topic", "demo", "--count", "1", "--timeout", "30s")
	if !strings.Contains(out, "hello") {
		t.Fatalf("consume output lacks the message:\n%s", out)
	}
	if waited := time.Since(published); waited < 1900*time.Millisecond {
		t.Fatalf("consume returned %v after publish, before the 2s delay", waited)
	}
	status := shardctl("status")
	if !strings.Contains(status, "127.0.0.1") {
		t.Fatalf("status output lacks the nodes:\n%s", status)
	}
}

// waitHealthy polls url until it answers 200.
func waitHealthy(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := proc.WaitFor(ctx, 50*time.Millisecond, proc.HTTP200(url)); err != nil {
		t.Fatal(err)
	}
}

// start runs a process with proc.Start, its output in logPath, and stops it
// by pid (SIGTERM, then SIGKILL) when the test ends; its log tail is printed
// if the test failed.
func start(t *testing.T, logPath, path string, args ...string) {
	t.Helper()
	p, err := proc.Start(filepath.Base(logPath), path, logPath, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("%s:\n%s", filepath.Base(logPath), p.Tail(4000))
		}
	})
}
