// Package integration runs real Sundial clusters inside a test process:
// brokers (real Dragonboat, real Pebble on disk) and a proxy, all over
// loopback gRPC, each with its own registry and test logger.
package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/proc"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy"
)

// Config shapes a test cluster.
type Config struct {
	Brokers int // default 3
	Shards  int // default 4
	// VisibilityTimeout is the brokers' default lease. Default 30s.
	VisibilityTimeout time.Duration
	// Tune, if set, edits each broker's config before it starts.
	Tune func(*broker.Config)
}

// Node is one broker of the cluster.
type Node struct {
	Config  broker.Config
	Server  *broker.Server // nil while stopped
	Metrics *prometheus.Registry
}

// Cluster is a running test cluster.
type Cluster struct {
	t       testing.TB
	cfg     Config
	Nodes   []*Node
	Proxy   *proxy.Server
	conn    *grpc.ClientConn
	members map[uint64]broker.Member

	Producer sundialv1.ProducerClient
	Consumer sundialv1.ConsumerClient
	Admin    sundialv1.AdminClient
	Backups  sundialv1.BackupsClient

	// ProxyMetrics is the proxy's private registry.
	ProxyMetrics *prometheus.Registry
}

// New starts a cluster and waits until the proxy routes to every shard.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Brokers == 0 {
		cfg.Brokers = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = 30 * time.Second
	}
	c := &Cluster{t: t, cfg: cfg, members: map[uint64]broker.Member{}}
	dir := t.TempDir()
	for i := 1; i <= cfg.Brokers; i++ {
		c.members[uint64(i)] = broker.Member{RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
	}
	for i := 1; i <= cfg.Brokers; i++ {
		bc := broker.DefaultConfig()
		bc.NodeID = uint64(i)
		bc.GRPCAddr = c.members[uint64(i)].GRPCAddr
		bc.RaftAddr = c.members[uint64(i)].RaftAddr
		bc.MetricsAddr = ""
		bc.AdminAddr = "" // no debug listener: several brokers run in one test
		bc.DataDir = filepath.Join(dir, fmt.Sprintf("broker-%d", i))
		bc.InitialMembers = c.members
		bc.Shards = cfg.Shards
		bc.RTT = 10 * time.Millisecond
		bc.ElectionRTT = 20
		bc.HeartbeatRTT = 2
		bc.VisibilityTimeout = cfg.VisibilityTimeout
		if cfg.Tune != nil {
			cfg.Tune(&bc)
		}
		c.Nodes = append(c.Nodes, &Node{Config: bc})
	}
	for i := range c.Nodes {
		c.StartBroker(i)
	}
	t.Cleanup(c.stop)
	pc := proxy.DefaultConfig()
	pc.AdminAddr = "" // no pprof listener: a test may run two proxies
	pc.GRPCAddr = "127.0.0.1:0"
	pc.HTTPAddr = "127.0.0.1:0"
	pc.Brokers = nil
	for _, m := range c.members {
		pc.Brokers = append(pc.Brokers, m.GRPCAddr)
	}
	c.ProxyMetrics = prometheus.NewRegistry()
	p, err := proxy.New(pc, logger(t).Named("proxy"), c.ProxyMetrics)
	if err != nil {
		t.Fatalf("proxy.New() error = %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("proxy.Start() error = %v", err)
	}
	c.Proxy = p
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	c.conn = conn
	c.Producer = sundialv1.NewProducerClient(conn)
	c.Consumer = sundialv1.NewConsumerClient(conn)
	c.Admin = sundialv1.NewAdminClient(conn)
	c.Backups = sundialv1.NewBackupsClient(conn)
	c.WaitReady()
	return c
}

// WaitReady waits until every shard is on the ring with a leader and the
// proxy knows it.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	Eventually(c.t, 60*time.Second, func() error {
		if !c.Proxy.Ready() {
			return fmt.Errorf("proxy has no routing table")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := c.Admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		if len(info.Shards) != c.cfg.Shards {
			return fmt.Errorf("%d shards, want %d", len(info.Shards), c.cfg.Shards)
		}
		for _, s := range info.Shards {
			if s.LeaderNodeId == 0 {
				return fmt.Errorf("shard %d has no leader", s.ShardId)
			}
			if s.Starting {
				return fmt.Errorf("shard %d is not on the ring yet", s.ShardId)
			}
			if !c.running(s.LeaderNodeId) {
				return fmt.Errorf("shard %d still led by stopped node %d", s.ShardId, s.LeaderNodeId)
			}
		}
		return nil
	})
}

func (c *Cluster) running(node uint64) bool {
	i := int(node) - 1
	return i >= 0 && i < len(c.Nodes) && c.Nodes[i].Server != nil
}

// StartBroker starts (or restarts) broker i (0-based) on its data.
func (c *Cluster) StartBroker(i int) {
	c.t.Helper()
	n := c.Nodes[i]
	n.Metrics = prometheus.NewRegistry()
	s, err := broker.New(n.Config, logger(c.t).Named(fmt.Sprintf("broker-%d", i+1)), n.Metrics)
	if err != nil {
		c.t.Fatalf("broker.New(%d) error = %v", i+1, err)
	}
	// The gRPC port of a stopped broker may linger in TIME_WAIT; retry.
	Eventually(c.t, 10*time.Second, func() error { return s.Start(context.Background()) })
	n.Server = s
}

// StopBroker stops broker i (0-based), keeping its data.
func (c *Cluster) StopBroker(i int) {
	c.t.Helper()
	if s := c.Nodes[i].Server; s != nil {
		s.Stop()
		c.Nodes[i].Server = nil
	}
}

// LeaderOf returns the 0-based index of the broker leading shard.
func (c *Cluster) LeaderOf(shard uint64) int {
	c.t.Helper()
	leader := -1
	Eventually(c.t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := c.Admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		for _, s := range info.Shards {
			if s.ShardId == shard && s.LeaderNodeId != 0 {
				leader = int(s.LeaderNodeId) - 1
				return nil
			}
		}
		return fmt.Errorf("shard %d has no known leader", shard)
	})
	return leader
}

func (c *Cluster) stop() {
	if c.conn != nil {
		c.conn.Close()
	}
	if c.Proxy != nil {
		c.Proxy.Stop()
	}
	for i := range c.Nodes {
		c.StopBroker(i)
	}
}

// Eventually polls fn until it returns nil or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	if err := proc.Poll(timeout, fn); err != nil {
		t.Fatalf("not true after %v: %v", timeout, err)
	}
}

// freeAddr returns a loopback address from proc's port allocator (ports
// 20000-31999, each held by an flock so test processes never collide).
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func logger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// grpcClient is newClient's client on a connection to addr, closed when
// the test ends.
func grpcClient[C any](t testing.TB, addr string, newClient func(grpc.ClientConnInterface) C) C {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return newClient(conn)
}
