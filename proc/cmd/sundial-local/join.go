package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// maxBroker is the highest broker index the port scheme fits: broker i's
// gRPC port 7500+i must stay below the first Raft port, 7601.
const maxBroker = 99

// nextJoinSlot is the first broker index above the cluster's brokers
// whose three ports in l are all free (busy answers whether an address
// accepts connections) and whose node id the cluster has not removed
// (removed): a removed id is never reused. A stopped joined broker's slot
// is free again, so joining at it restarts that broker on its data.
func nextJoinSlot(l Layout, brokers int, busy func(addr string) bool, removed func(id int) bool) (int, BrokerAddrs, error) {
	for i := brokers + 1; i <= maxBroker; i++ {
		b := l.broker(i)
		if !removed(i) && !busy(b.GRPC) && !busy(b.Raft) && !busy(b.Metrics) && (b.Admin == "" || !busy(b.Admin)) {
			return i, b, nil
		}
	}
	return 0, BrokerAddrs{}, fmt.Errorf("no free broker ports between broker-%d and broker-%d", brokers+1, maxBroker)
}

// runJoin starts one more broker that joins the running local cluster of
// cfg (its brokers' gRPC addresses are the --join list) at the next free
// slot i: node id i, the ports of DESIGN §5, data in <data dir>/broker-i.
// It waits for the broker's /readyz, then keeps it running until ctx ends
// or it exits, and stops it by pid.
//
// With wait (sundial-local join --wait, make join WAIT=1) a new broker is
// started in the waiting state instead (--wait-for-add, no --join): runJoin
// waits for its gRPC port, prints the shardctl add-node command that adds
// it, and then waits for /readyz without a time limit. A slot whose data
// dir already has an identity restarts that broker with --join either way.
func runJoin(ctx context.Context, cfg Config, wait bool, out io.Writer) error {
	var sec *secure
	if cfg.Secure {
		var err error
		if sec, err = prepareSecure(cfg.DataDir); err != nil {
			return fmt.Errorf("the secure cluster's files in %s: %w", filepath.Join(cfg.DataDir, "secure"), err)
		}
	}
	bin := filepath.Join(cfg.BinDir, "sundial-broker")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s is missing: run 'make build'", bin)
	}
	var seeds []string
	for _, b := range cfg.Layout.Brokers {
		if proc.TCPOpen(b.GRPC)(ctx) == nil {
			seeds = append(seeds, b.GRPC)
		}
	}
	if len(seeds) == 0 {
		return fmt.Errorf("no broker of the local cluster answers at %s: start it first with 'make run'", cfg.Layout.Brokers[0].GRPC)
	}
	// The ids the cluster reports removed, and those a run recorded.
	removed, _ := readRemoved(cfg.DataDir)
	if removed == nil {
		removed = map[int]bool{}
	}
	for id := range clusterRemovedIDs(ctx, cfg.Layout.ProxyHTTP, sec) {
		removed[id] = true
	}
	i, b, err := nextJoinSlot(cfg.Layout, cfg.Brokers, func(addr string) bool { return proc.TCPOpen(addr)(ctx) == nil }, func(id int) bool { return removed[id] })
	if err != nil {
		return err
	}
	name := fmt.Sprintf("broker-%d", i)
	dir := filepath.Join(cfg.DataDir, name)
	logPath := filepath.Join(cfg.DataDir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// A data dir with an identity is a broker that joined before: it starts
	// on its data, keeps its node id and replicas, and does not join again.
	_, statErr := os.Stat(filepath.Join(dir, "identity.json"))
	restarting := statErr == nil
	waiting := wait && !restarting
	args := []string{"--node-id", strconv.Itoa(i), "--grpc-addr", b.GRPC, "--raft-addr", b.Raft, "--metrics-addr", b.Metrics,
		"--admin-addr", b.adminFlag(), "--data-dir", dir, "--log-level", cfg.LogLevel}
	if waiting {
		args = append(args, "--wait-for-add")
	} else {
		args = append(args, "--join", strings.Join(seeds, ","))
	}
	readyz, readyClient := "http://"+b.Metrics+"/readyz", http.DefaultClient
	if sec != nil {
		tlsArgs, err := sec.brokerArgs(i)
		if err != nil {
			return err
		}
		args = append(args, tlsArgs...)
		if !restarting && !waiting {
			// Over TLS a broker joins only with a join token: one for
			// this broker, single-use, short-lived.
			path, err := sec.joinToken(ctx, cfg.BinDir, cfg.Layout.ProxyGRPC, name)
			if err != nil {
				return err
			}
			args = append(args, "--join-token-file", path)
		}
		readyz = "https://" + b.Metrics + "/readyz" // with TLS files the metrics port serves HTTPS
		if readyClient, err = sec.httpsClient(); err != nil {
			return err
		}
	}
	p, err := proc.Start(name, bin, logPath, args...)
	if err != nil {
		return err
	}
	defer func() {
		if !p.Exited() {
			fmt.Fprintf(out, "stopping %s (pid %d)\n", name, p.Pid())
			if err := p.Stop(); err != nil {
				fmt.Fprintf(out, "sundial-local: %v\n", err)
			}
		}
	}()
	if waiting {
		fmt.Fprintf(out, "started %s (pid %d) waiting to be added to a cluster, log %s\n", name, p.Pid(), logPath)
		if err := waitAdded(ctx, cfg, name, b, logPath, p, sec, out); err != nil || ctx.Err() != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "started %s (pid %d) joining %s, log %s\n", name, p.Pid(), strings.Join(seeds, ","), logPath)
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	err = proc.WaitFor(wctx, 500*time.Millisecond, proc.HTTP200Client(readyClient, readyz), p)
	cancel()
	switch {
	case ctx.Err() != nil:
		return nil
	case p.Exited():
		return fmt.Errorf("%s (pid %d) exited while starting (%w); last lines of %s:\n%s", name, p.Pid(), p.Err(), logPath, indent(p.Tail(3000)))
	case err != nil:
		return fmt.Errorf("%s did not become ready (%w); last lines of %s:\n%s", name, err, logPath, indent(p.Tail(3000)))
	}
	what, holds := "joined", "It holds no shard replicas until a rebalance."
	switch {
	case restarting:
		what, holds = "restarted on its data", "It keeps its node id and the replicas it held."
	case waiting:
		what = "added"
	}
	scheme, shardctl := "http", "bin/shardctl"
	if sec != nil {
		scheme, shardctl = "https", sec.shardctlCommand()
	}
	fmt.Fprintf(out, "\n%s %s: gRPC %s   metrics %s://%s/metrics   raft %s   data %s\n"+
		"%s See it with: %s status\nCtrl-C stops it; its data stays for the next 'make join'.\n",
		name, what, b.GRPC, scheme, b.Metrics, b.Raft, dir, holds, shardctl)
	select {
	case <-ctx.Done():
		return nil
	case <-p.Done():
		return fmt.Errorf("%s (pid %d) exited (%w); last lines of %s:\n%s", name, p.Pid(), p.Err(), logPath, indent(p.Tail(3000)))
	}
}

// waitAdded waits for the waiting broker p to listen on its gRPC address,
// prints the shardctl add-node command that adds it, and then waits, with
// no time limit, for its /readyz to answer 200 (it does once it is added).
// It returns nil when ctx ends.
func waitAdded(ctx context.Context, cfg Config, name string, b BrokerAddrs, logPath string, p *proc.Process, sec *secure, out io.Writer) error {
	wctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	err := proc.WaitFor(wctx, 500*time.Millisecond, proc.TCPOpen(b.GRPC), p)
	cancel()
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		return fmt.Errorf("%s did not listen on %s (%w); last lines of %s:\n%s", name, b.GRPC, err, logPath, indent(p.Tail(3000)))
	}
	shardctl, readyz, client := "bin/shardctl", "http://"+b.Metrics+"/readyz", http.DefaultClient
	if sec != nil {
		shardctl, readyz = sec.shardctlCommand(), "https://"+b.Metrics+"/readyz"
		if client, err = sec.httpsClient(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n%s waits on gRPC %s. Add it to the cluster from another shell with:\n  %s add-node %s\n", name, b.GRPC, shardctl, b.GRPC)
	err = proc.WaitFor(ctx, 500*time.Millisecond, proc.HTTP200Client(client, readyz), p)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s (pid %d) exited while waiting to be added (%w); last lines of %s:\n%s", name, p.Pid(), p.Err(), logPath, indent(p.Tail(3000)))
	}
	return nil
}

// clusterRemovedIDs asks the proxy's HTTP API (GET /v1/cluster) which node
// ids the cluster removed (for a secure cluster over HTTPS with the admin
// token). Without an answer it answers none: the join then finds out from
// the broker's refusal.
func clusterRemovedIDs(ctx context.Context, proxyHTTP string, sec *secure) map[int]bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url, client := "http://"+proxyHTTP+"/v1/cluster", http.DefaultClient
	if sec != nil {
		var err error
		if client, err = sec.httpsClient(); err != nil {
			return nil
		}
		url = "https://" + proxyHTTP + "/v1/cluster"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil
	}
	if sec != nil {
		tok, err := os.ReadFile(sec.path(adminTokenFile))
		if err != nil {
			return nil
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	ids, err := removedNodeIDs(resp.Body)
	if err != nil {
		return nil
	}
	return ids
}

// removedNodeIDs reads the removed node ids out of a /v1/cluster answer.
func removedNodeIDs(r io.Reader) (map[int]bool, error) {
	var info struct {
		Nodes []struct {
			NodeID string `json:"nodeId"`
			State  string `json:"state"`
		} `json:"nodes"`
	}
	if err := json.NewDecoder(r).Decode(&info); err != nil {
		return nil, err
	}
	ids := map[int]bool{}
	for _, n := range info.Nodes {
		if id, err := strconv.Atoi(n.NodeID); err == nil && n.State == "NODE_STATE_REMOVED" {
			ids[id] = true
		}
	}
	return ids, nil
}

// findRunningCluster finds, among root/local and root/local-*, the data
// directory of the `make run` that runs now (its control socket answers),
// and its bootstrap broker count (the entries of its cluster-members). It
// answers found false when none runs, and an error when several do.
func findRunningCluster(root string) (dir string, brokers int, found bool, err error) {
	dirs, err := filepath.Glob(filepath.Join(root, "local-*"))
	if err != nil {
		return "", 0, false, err
	}
	var running []string
	for _, d := range append([]string{filepath.Join(root, "local")}, dirs...) {
		conn, err := net.DialTimeout("unix", controlPath(d), time.Second)
		if err != nil {
			continue
		}
		_ = conn.Close()
		running = append(running, d)
	}
	switch len(running) {
	case 0:
		return "", 0, false, nil
	case 1:
	default:
		return "", 0, false, fmt.Errorf("several local clusters run (%s): name one with SUNDIAL_LOCAL_DIR=<dir>", strings.Join(running, ", "))
	}
	b, err := os.ReadFile(filepath.Join(running[0], "cluster-members"))
	if err != nil {
		return "", 0, false, fmt.Errorf("the cluster running on %s: %w", running[0], err)
	}
	n := len(strings.Split(strings.TrimSpace(string(b)), ","))
	if n < 1 || n > 9 {
		return "", 0, false, fmt.Errorf("%s lists %d members, want 1..9", filepath.Join(running[0], "cluster-members"), n)
	}
	return running[0], n, true, nil
}
