package host

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/operator"
)

func loopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start's ctx bounds only the start: once Start returned, cancelling it
// must not stop the host from registering, starting the shard its
// executor's shard decisions create (a one-broker bootstrap), leading it
// and committing through its proposer.
func TestStartContextBoundsOnlyTheStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	h := startOneBrokerHost(ctx, t, prometheus.NewRegistry(), nil)
	cancel()
	_, lead := waitShardLeader(t, h)
	proposeSweeps(t, lead, 1)
}

// proposeSweeps commits n one-message sweeps through lead's proposer, one
// after another: the smallest commands that make Raft entries.
func proposeSweeps(t *testing.T, lead *Leading, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for range n {
		sweep := &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{NowMs: time.Now().UnixMilli(), Limit: 1}}}
		if _, err := lead.Proposer.Propose(ctx, sweep); err != nil {
			t.Fatalf("Propose(sweep): %v", err)
		}
	}
}

// startOneBrokerHost starts, with ctx, a host bootstrapping a one-broker
// cluster on loopback with small test settings (tune, if not nil, adjusts
// them), and the operator that creates its one shard once it registered;
// the operator runs until the test's cleanup, whatever becomes of ctx.
func startOneBrokerHost(ctx context.Context, t *testing.T, reg *prometheus.Registry, tune func(*Config)) *Host {
	t.Helper()
	raftAddr, grpcAddr := loopbackAddr(t), loopbackAddr(t)
	cfg := Config{
		NodeID: 1, RaftAddr: raftAddr, GRPCAddr: grpcAddr, DataDir: t.TempDir(),
		InitialMembers: map[uint64]Member{1: {RaftAddr: raftAddr, GRPCAddr: grpcAddr}},
		RTT:            10 * time.Millisecond, ElectionRTT: 20, HeartbeatRTT: 2, SnapshotEntries: 1000,
		RaftWorkers: 1, RaftLogShards: 1, CacheBytes: 1 << 20, MemTableBytes: 1 << 20,
	}
	if tune != nil {
		tune(&cfg)
	}
	h, err := New(cfg, zaptest.NewLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		h.Stop()
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	shards := operator.NewShards(shardsHost{h.MetaClient(), h.Replicas()}, 1, operator.ShardsConfig{InitialMembers: []uint64{1}, Shards: 1}, zaptest.NewLogger(t), nil)
	shards.Start(context.WithoutCancel(ctx))
	t.Cleanup(shards.Stop)
	return h
}

// waitShardLeader waits up to 60 s for h to lead one of its shards.
func waitShardLeader(t *testing.T, h *Host) (uint64, *Leading) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range h.Replicas().HostedShards() {
			if lead, _, _, _ := h.Replicas().LeaderInfo(id); lead != nil {
				return id, lead
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no shard led within 60s (hosted shards %v)", h.Replicas().HostedShards())
	return 0, nil
}
