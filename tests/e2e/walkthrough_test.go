// Package e2e runs the README's "Grow, shrink and heal a local cluster"
// walkthrough end to end with the real binaries on free loopback ports,
// driving the cluster with the shardctl binary as an operator would, so its
// real output is what is checked.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/framework"
)

// shardctl runs the shardctl binary against the cluster's proxy.
type shardctl struct {
	t     *testing.T
	bin   string
	proxy string
}

// buildShardctl builds shardctl from this checkout into a temporary
// directory (the build cache makes a rebuild cheap).
func buildShardctl(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "shardctl")
	cmd := exec.Command("go", "build", "-o", bin, "./shardctl/cmd/shardctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build shardctl: %v\n%s", err, out)
	}
	return bin
}

// run runs shardctl with args (and stdin), failing the test on a non-zero
// exit; it answers stdout and stderr.
func (s shardctl) run(stdin string, args ...string) (string, string) {
	s.t.Helper()
	stdout, stderr, err := s.try(stdin, args...)
	if err != nil {
		s.t.Fatalf("shardctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout, stderr
}

func (s shardctl) try(stdin string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"--proxy", s.proxy}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// status is the part of shardctl status -o json the walkthrough checks.
type status struct {
	Nodes []struct {
		ID       uint64 `json:"node_id"`
		State    string `json:"state"`
		Replicas int    `json:"replicas"`
		Leaders  int    `json:"leaders"`
	} `json:"nodes"`
	Shards []struct {
		ID uint64 `json:"shard_id"`
	} `json:"shards"`
}

func (s shardctl) status() status {
	s.t.Helper()
	out, _ := s.run("", "status", "-o", "json")
	var st status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		s.t.Fatalf("shardctl status -o json: %v\n%s", err, out)
	}
	return st
}

// publish publishes n messages named prefix-i due after delay through
// shardctl publish (one per stdin line) and answers their payloads.
func (s shardctl) publish(topic, prefix string, n int, delay time.Duration) []string {
	s.t.Helper()
	var lines, payloads []string
	for i := range n {
		p := prefix + "-" + strconv.Itoa(i)
		lines = append(lines, p)
		payloads = append(payloads, p)
	}
	s.run(strings.Join(lines, "\n")+"\n", "publish", "--topic", topic, "--delay", delay.String(), "-o", "json")
	return payloads
}

// TestWalkthrough: 3 brokers → join 2 → rebalance (dry run, then for real)
// → drain one → remove it → shards add 4, publishing along the way; every
// message published is delivered. shardctl runs as a process for status
// -o json, rebalance --dry-run, rebalance, drain-node, remove-node, shards
// add, publish and consume.
func TestWalkthrough(t *testing.T) {
	start := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	c := framework.NewCluster(t, framework.Config{Brokers: 3, Shards: 4, StartTimeout: 90 * time.Second})
	ctl := shardctl{t: t, bin: buildShardctl(t), proxy: c.ProxyAddrs()[0]}
	step("3 brokers and a proxy ready, shardctl built")
	const topic = "walkthrough"
	var published []string
	published = append(published, ctl.publish(topic, "start", 50, 2*time.Second)...)

	for range 2 {
		if _, err := c.Join(60 * time.Second); err != nil {
			t.Fatalf("join: %v", err)
		}
	}
	step("2 brokers joined")
	st := ctl.status()
	if len(st.Nodes) != 5 {
		t.Fatalf("status after 2 joins lists %d nodes, want 5: %+v", len(st.Nodes), st.Nodes)
	}
	for _, n := range st.Nodes {
		if n.ID > 3 && (n.State != "active" || n.Replicas != 0) {
			t.Fatalf("joined node %+v, want active with no replicas before a rebalance", n)
		}
	}

	out, _ := ctl.run("", "rebalance", "--dry-run")
	if !strings.Contains(out, "move-replica") || !strings.Contains(out, "nothing changed") {
		t.Fatalf("rebalance --dry-run printed:\n%s\nwant replica moves and that nothing changed", out)
	}
	if st := ctl.status(); st.Nodes[3].Replicas != 0 || st.Nodes[4].Replicas != 0 {
		t.Fatalf("a dry run moved replicas: %+v", st.Nodes)
	}
	published = append(published, ctl.publish(topic, "joined", 50, 2*time.Second)...)

	out, _ = ctl.run("", "rebalance")
	step("rebalanced")
	if !strings.Contains(out, "balanced: nothing left to move") {
		t.Fatalf("rebalance printed:\n%s\nwant it to end balanced", out)
	}
	st = ctl.status()
	lo, hi := 1<<30, 0
	for _, n := range st.Nodes {
		lo, hi = min(lo, n.Replicas), max(hi, n.Replicas)
	}
	if hi-lo > 1 {
		t.Fatalf("replicas per node after rebalance %+v, want max-min <= 1", st.Nodes)
	}
	// Replicas stay balanced; a leadership may have moved since (an
	// election on this busy machine), so a leader transfer may be planned.
	out, _ = ctl.run("", "rebalance", "--dry-run")
	if strings.Contains(out, "move-replica") {
		t.Fatalf("rebalance --dry-run after a rebalance printed:\n%s\nwant no replica move", out)
	}
	published = append(published, ctl.publish(topic, "rebalanced", 50, 2*time.Second)...)

	// Drain and remove broker 1: a meta voter (a joined broker is
	// promoted in its place), perhaps the meta leader (it hands the
	// leadership on first), and the first seed of the proxy, so the broker
	// the proxy follows the routing table from.
	const victim = uint64(1)
	id := strconv.FormatUint(victim, 10)
	out, _ = ctl.run("", "drain-node", id)
	step("node " + id + " drained")
	if !strings.Contains(out, "node "+id+" drained") {
		t.Fatalf("drain-node %s printed:\n%s\nwant the node drained", id, out)
	}
	published = append(published, ctl.publish(topic, "drained", 50, 2*time.Second)...)
	out, _ = ctl.run("", "remove-node", id)
	if !strings.Contains(out, "removed") {
		t.Fatalf("remove-node %s printed:\n%s\nwant it removed", id, out)
	}
	// The removed broker keeps running here, as it would until an
	// operator stops it: the proxy must carry on regardless.
	published = append(published, ctl.publish(topic, "removed", 50, 2*time.Second)...)

	step("node " + id + " removed")
	out, _ = ctl.run("", "shards", "add", "4")
	step("4 shards added")
	if !strings.Contains(out, "serving") {
		t.Fatalf("shards add 4 printed:\n%s\nwant the new shards serving", out)
	}
	st = ctl.status()
	if len(st.Shards) != 8 {
		t.Fatalf("status after shards add 4 lists %d shards, want 8", len(st.Shards))
	}
	for _, n := range st.Nodes {
		if n.ID == victim && (n.State != "removed" || n.Replicas != 0) {
			t.Fatalf("removed node %+v, want removed with no replicas", n)
		}
	}
	published = append(published, ctl.publish(topic, "grown", 50, 2*time.Second)...)

	// Every message published along the way is delivered (at least once).
	out, stderr, err := ctl.try("", "consume", "--topic", topic, "--count", strconv.Itoa(len(published)),
		"--timeout", "60s", "-o", "json")
	step("consumed")
	got := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d struct {
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("consume -o json line %q: %v", sc.Text(), err)
		}
		got[d.Payload] = true
	}
	var missing []string
	for _, p := range published {
		if !got[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 || err != nil {
		t.Fatalf("consume (err %v, stderr %s): %d of %d published messages not delivered: %s",
			err, stderr, len(missing), len(published), fmt.Sprint(missing))
	}
}
