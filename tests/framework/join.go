package framework

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SetJoinArgs sets flags every later Join gives its broker first (a
// --join-token-file, say, once the cluster can make a token).
func (c *Cluster) SetJoinArgs(args ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joinArgs = slices.Clone(args)
}

// Join starts one more broker (the next node id) that joins the running
// cluster with --join through the brokers' gRPC forwarders, and waits
// until it serves (readiness). Like every broker it is reached through
// forwarders, so the faults apply to it; Kill and Restart work on it (a
// restart finds its data and skips the join). args are extra flags of
// this broker (after Config.BrokerArgs), e.g. --join-token-file. It
// returns the node id.
func (c *Cluster) Join(timeout time.Duration, args ...string) (int, error) {
	c.mu.Lock()
	id := len(c.Brokers) + 1
	var seeds []string
	for _, b := range c.Brokers {
		seeds = append(seeds, b.GRPCAddr)
	}
	extra := append(slices.Clone(c.joinArgs), args...)
	c.mu.Unlock()
	b := &Broker{ID: id, Name: fmt.Sprintf("broker-%d", id), DataDir: filepath.Join(c.dir, fmt.Sprintf("broker-%d", id)),
		join: strings.Join(seeds, ","), extraArgs: extra}
	for _, a := range []*string{&b.RaftAddr, &b.GRPCAddr, &b.raftListen, &b.grpcListen, &b.MetricsAddr, &b.AdminAddr} {
		*a = MustFreeAddr(c.t)
	}
	var err error
	if b.raftFwd, err = c.forwarder(b, "raft", b.RaftAddr, b.raftListen); err != nil {
		return 0, err
	}
	if b.grpcFwd, err = c.forwarder(b, "grpc", b.GRPCAddr, b.grpcListen); err != nil {
		b.raftFwd.Close()
		return 0, err
	}
	c.mu.Lock()
	c.Brokers = append(c.Brokers, b)
	c.mu.Unlock()
	if err := c.startBroker(b); err != nil {
		return 0, err
	}
	c.mu.Lock()
	p := b.proc
	c.mu.Unlock()
	if err := c.pollProc(time.Now().Add(timeout), p, c.MetricsURL(b)); err != nil {
		return 0, fmt.Errorf("%s: %w", b.Name, err)
	}
	return id, nil
}

// brokerArgs are the flags broker b starts with: --join for a broker
// added by Join, the initial members for the others.
func (c *Cluster) brokerArgs(b *Broker) []string {
	args := []string{"--node-id", strconv.Itoa(b.ID), "--raft-addr", b.RaftAddr, "--raft-listen-addr", b.raftListen,
		"--grpc-addr", b.grpcListen, "--advertise-addr", b.GRPCAddr, "--metrics-addr", b.MetricsAddr,
		"--admin-addr", b.AdminAddr,
		"--data-dir", b.DataDir, "--log-level", c.cfg.LogLevel}
	if b.join != "" {
		args = append(args, "--join", b.join)
	} else {
		args = append(args, "--initial-members", c.members, "--shards", strconv.Itoa(c.cfg.Shards))
	}
	return append(append(args, c.cfg.BrokerArgs...), b.extraArgs...)
}
