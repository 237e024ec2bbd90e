package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/broker"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// joinConfig is a broker of its own data dir that joins c through the
// brokers at seeds, asking for node id (0: any).
func joinConfig(t *testing.T, c *Cluster, id uint64, seeds ...string) broker.Config {
	t.Helper()
	bc := c.Nodes[0].Config
	bc.NodeID, bc.InitialMembers = id, nil
	bc.Join, bc.JoinTimeout = seeds, 15*time.Second
	bc.GRPCAddr, bc.RaftAddr = freeAddr(t), freeAddr(t)
	bc.DataDir = filepath.Join(t.TempDir(), "joiner")
	return bc
}

// seedsFollowerFirst lists the brokers' gRPC addresses with one that does
// not lead the meta group first, so a join is forwarded to the leader.
func seedsFollowerFirst(t *testing.T, c *Cluster) []string {
	t.Helper()
	info := clusterInfo(t, c)
	var first, rest []string
	for _, n := range c.Nodes[:3] {
		if n.Config.NodeID != info.MetaLeaderNodeId && first == nil {
			first = append(first, n.Config.GRPCAddr)
			continue
		}
		rest = append(rest, n.Config.GRPCAddr)
	}
	return append(first, rest...)
}

func clusterInfo(t *testing.T, c *Cluster) *sundialv1.ClusterInfo {
	t.Helper()
	var info *sundialv1.ClusterInfo
	Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		info, err = c.Admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err == nil && info.MetaLeaderNodeId == 0 {
			err = errors.New("no meta leader yet")
		}
		return err
	})
	return info
}

func identify(addr string) (*brokerv1.IdentifyResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return brokerv1.NewPeerClient(conn).Identify(ctx, &brokerv1.IdentifyRequest{})
}

// TestJoinBroker joins a 4th broker to a running 3-broker cluster through a
// broker that does not lead the meta group: it is given node id 4, shows
// in GetClusterInfo as active and not a meta voter, its meta replica
// catches up (it answers the cluster's state from its own replica), and a
// restart keeps its identity without joining again.
func TestJoinBroker(t *testing.T) {
	c := New(t, Config{Shards: 2})
	publish(t, c, &sundialv1.Message{Topic: "join", Payload: []byte("before the join")})
	cfg := joinConfig(t, c, 0, seedsFollowerFirst(t, c)...)
	c.Nodes = append(c.Nodes, &Node{Config: cfg})
	c.StartBroker(3)
	if got := c.Nodes[3].Server.NodeID(); got != 4 {
		t.Fatalf("joined broker's NodeID() = %d, want 4 (the next free id)", got)
	}
	Eventually(t, 30*time.Second, func() error {
		for _, n := range clusterInfo(t, c).Nodes {
			if n.NodeId == 4 {
				if n.State != sundialv1.NodeState_NODE_STATE_ACTIVE || n.MetaVoter || n.GrpcAddr != cfg.GRPCAddr || n.RaftAddr != cfg.RaftAddr {
					return fmt.Errorf("node 4 = %v, want active, not a meta voter, at %s and %s", n, cfg.GRPCAddr, cfg.RaftAddr)
				}
				return nil
			}
		}
		return errors.New("node 4 not in GetClusterInfo")
	})
	want := clusterInfo(t, c)
	// The joined broker's own meta replica (Identify reads it, no quorum)
	// holds the cluster's state: the cluster id and all four nodes.
	var inc string
	Eventually(t, 30*time.Second, func() error {
		got, err := identify(cfg.GRPCAddr)
		if err != nil {
			return err
		}
		if got.NodeId != 4 || len(got.Nodes) != 4 || got.ClusterId == "" {
			return fmt.Errorf("joined broker's meta replica answers %v, want node 4 with the cluster's 4 nodes (routing version %d)", got, want.RoutingVersion)
		}
		inc = got.Nodes[3].Incarnation
		return nil
	})
	before, err := os.ReadFile(filepath.Join(cfg.DataDir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}

	c.StopBroker(3)
	c.StartBroker(3)
	if got := c.Nodes[3].Server.NodeID(); got != 4 {
		t.Fatalf("restarted joined broker's NodeID() = %d, want 4", got)
	}
	after, err := os.ReadFile(filepath.Join(cfg.DataDir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The restart keeps the identity and counts itself (identity.Starts).
	var was, is struct {
		NodeID      uint64 `json:"node_id"`
		Incarnation string `json:"incarnation"`
		ClusterID   string `json:"cluster_id"`
		Starts      uint64 `json:"starts"`
	}
	if err := errors.Join(json.Unmarshal(before, &was), json.Unmarshal(after, &is)); err != nil {
		t.Fatal(err)
	}
	if is.NodeID != was.NodeID || is.Incarnation != was.Incarnation || is.ClusterID != was.ClusterID || is.Starts != was.Starts+1 {
		t.Fatalf("identity after restart = %s, want %s with one more start", after, before)
	}
	Eventually(t, 30*time.Second, func() error {
		info := clusterInfo(t, c)
		if len(info.Nodes) != 4 {
			return fmt.Errorf("%d nodes after the restart, want 4 (no second join)", len(info.Nodes))
		}
		got, err := identify(cfg.GRPCAddr)
		if err != nil {
			return err
		}
		if len(got.Nodes) != 4 || got.Nodes[3].Incarnation != inc {
			return fmt.Errorf("restarted broker's meta replica answers %v, want node 4 with incarnation %s", got, inc)
		}
		return nil
	})
	publish(t, c, &sundialv1.Message{Topic: "join", Payload: []byte("after the join")})
}

// TestJoinRefusals: a join that asks for a taken node id, or brings a
// data dir of another cluster, is refused with a message saying so; a
// join address that is not host:port is a config error; a join whose
// brokers never answer gives up naming them.
func TestJoinRefusals(t *testing.T) {
	c := New(t, Config{Shards: 1})
	seeds := seedsFollowerFirst(t, c)

	t.Run("taken node id", func(t *testing.T) {
		err := startRefused(t, joinConfig(t, c, 2, seeds...))
		if !strings.Contains(err.Error(), "node 2 is already registered with another data dir") {
			t.Fatalf("Start(join as node 2) = %v, want a refusal naming node 2 as taken", err)
		}
	})

	t.Run("another cluster's data dir", func(t *testing.T) {
		cfg := joinConfig(t, c, 0, seeds...)
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The identity file a broker of cluster "other-cluster" left.
		other := `{"node_id":7,"incarnation":"0123456789abcdef0123456789abcdef","cluster_id":"other-cluster"}`
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "identity.json"), []byte(other), 0o644); err != nil {
			t.Fatal(err)
		}
		err := startRefused(t, cfg)
		if !errors.Is(err, broker.ErrIdentityMismatch) || !strings.Contains(err.Error(), "belongs to cluster other-cluster") {
			t.Fatalf("Start(join with another cluster's data dir) = %v, want %v naming cluster other-cluster", err, broker.ErrIdentityMismatch)
		}
	})

	t.Run("join address not host:port", func(t *testing.T) {
		cfg := joinConfig(t, c, 0, "127.0.0.1")
		_, err := broker.New(cfg, logger(t), prometheus.NewRegistry())
		if err == nil || !strings.Contains(err.Error(), `join: join: bad address: "127.0.0.1"`) {
			t.Fatalf("broker.New(join 127.0.0.1) = %v, want a join config error naming the address", err)
		}
	})

	t.Run("no broker answers", func(t *testing.T) {
		dead := freeAddr(t) // nothing listens there
		cfg := joinConfig(t, c, 0, dead)
		cfg.JoinTimeout = 2 * time.Second
		err := startRefused(t, cfg)
		if !strings.Contains(err.Error(), "no broker answered") || !strings.Contains(err.Error(), dead) {
			t.Fatalf("Start(join %s) = %v, want an error naming the address no broker answered at", dead, err)
		}
		if len(clusterInfo(t, c).Nodes) != 3 {
			t.Fatalf("a failed join registered a node")
		}
	})
}
