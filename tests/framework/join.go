package framework

import (
	"fmt"
	"path/filepath"
	"time"
)

// JoinBroker starts one more broker, with the next node id, that joins the
// running cluster (--join with the initial brokers' gRPC addresses) behind
// its own forwarders like the others, and waits until it is ready. It
// holds no replicas until operations place some on it; Kill, Restart,
// Pause and the partitions work on it by its id (a restart finds its
// identity in its data dir and skips the join).
func (c *Cluster) JoinBroker(timeout time.Duration) (*Broker, error) {
	c.mu.Lock()
	id := len(c.Brokers) + 1
	c.mu.Unlock()
	b := &Broker{ID: id, Name: fmt.Sprintf("broker-%d", id), DataDir: filepath.Join(c.dir, fmt.Sprintf("broker-%d", id)), joined: true}
	for _, a := range []*string{&b.RaftAddr, &b.GRPCAddr, &b.raftListen, &b.grpcListen, &b.MetricsAddr} {
		*a = MustFreeAddr(c.t)
	}
	var err error
	if b.raftFwd, err = c.forwarder(b, "raft", b.RaftAddr, b.raftListen); err != nil {
		return nil, err
	}
	if b.grpcFwd, err = c.forwarder(b, "grpc", b.GRPCAddr, b.grpcListen); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.Brokers = append(c.Brokers, b)
	c.mu.Unlock()
	if err := c.startBroker(b); err != nil {
		return nil, err
	}
	if err := c.pollProc(time.Now().Add(timeout), b.proc, "http://"+b.MetricsAddr); err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name, err)
	}
	return b, nil
}
