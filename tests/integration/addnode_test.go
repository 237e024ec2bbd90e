package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func addToCluster(addr string, join []string) (*brokerv1.AddToClusterResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return brokerv1.NewPeerClient(conn).AddToCluster(ctx, &brokerv1.AddToClusterRequest{Join: join})
}

// TestAddWaitingBroker starts a broker with neither join nor initial
// members: its Start waits, serving Peer.AddToCluster (what shardctl
// add-node sends). A bad address is InvalidArgument; the add with the
// cluster's brokers makes it node 4, Start returns, and it appears in
// GetClusterInfo. Restarted, it does not wait again, and a second add is
// refused as it is a member.
func TestAddWaitingBroker(t *testing.T) {
	c := New(t, Config{Shards: 1})
	cfg := c.Nodes[0].Config
	cfg.NodeID, cfg.InitialMembers, cfg.Join = 0, nil, nil
	cfg.GRPCAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.DataDir = filepath.Join(t.TempDir(), "waiting")
	s, err := broker.New(cfg, logger(t).Named("waiting"), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("broker.New(waiting) = %v", err)
	}
	started := make(chan error, 1)
	go func() { started <- s.Start(context.Background()) }()

	Eventually(t, 20*time.Second, func() error {
		_, err := addToCluster(cfg.GRPCAddr, []string{"not-an-address"})
		if status.Code(err) != codes.InvalidArgument {
			return fmt.Errorf("AddToCluster(bad address) = %w, want InvalidArgument", err)
		}
		return nil
	})
	var seeds []string
	for _, n := range c.Nodes {
		seeds = append(seeds, n.Config.GRPCAddr)
	}
	resp, err := addToCluster(cfg.GRPCAddr, seeds)
	if err != nil || resp.GetNodeId() != 4 || resp.GetClusterId() == "" {
		t.Fatalf("AddToCluster() = %v, %v, want node 4 of the cluster", resp, err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start() after the add = %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Start() did not return after the add")
	}
	cfg.NodeID = 4
	c.Nodes = append(c.Nodes, &Node{Config: cfg, Server: s})
	Eventually(t, 30*time.Second, func() error {
		for _, n := range clusterInfo(t, c).Nodes {
			if n.NodeId == 4 && n.State == sundialv1.NodeState_NODE_STATE_ACTIVE && n.GrpcAddr == cfg.GRPCAddr {
				return nil
			}
		}
		return errors.New("node 4 not active in GetClusterInfo")
	})

	c.StopBroker(3)
	c.Nodes[3].Config.NodeID = 0 // as configured: the identity names node 4
	c.StartBroker(3)             // returns without an add: the data dir was added before
	if got := c.Nodes[3].Server.NodeID(); got != 4 {
		t.Fatalf("restarted NodeID() = %d, want 4", got)
	}
	Eventually(t, 20*time.Second, func() error {
		_, err := addToCluster(cfg.GRPCAddr, seeds)
		if status.Code(err) != codes.FailedPrecondition {
			return fmt.Errorf("AddToCluster(member) = %w, want FailedPrecondition", err)
		}
		return nil
	})
}
