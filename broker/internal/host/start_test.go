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
	raftAddr, grpcAddr := loopbackAddr(t), loopbackAddr(t)
	h, err := New(Config{
		NodeID: 1, RaftAddr: raftAddr, GRPCAddr: grpcAddr, DataDir: t.TempDir(),
		InitialMembers: map[uint64]Member{1: {RaftAddr: raftAddr, GRPCAddr: grpcAddr}},
		RTT:            10 * time.Millisecond, ElectionRTT: 20, HeartbeatRTT: 2, SnapshotEntries: 1000,
		RaftWorkers: 1, RaftLogShards: 1, CacheBytes: 1 << 20, MemTableBytes: 1 << 20,
	}, zaptest.NewLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if err := h.Start(ctx); err != nil {
		h.Stop()
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	// The broker's executor creates the shard (a one-member cluster: one
	// shard of one replica) once the node registered.
	shards := operator.NewShards(h, 1, operator.ShardsConfig{InitialMembers: []uint64{1}, Shards: 1}, zaptest.NewLogger(t), nil)
	shards.Start(t.Context())
	t.Cleanup(shards.Stop)
	cancel()

	var lead *Leading
	deadline := time.Now().Add(60 * time.Second)
	for lead == nil && time.Now().Before(deadline) {
		for _, id := range h.HostedShards() {
			lead, _, _, _ = h.LeaderInfo(id)
		}
		if lead == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if lead == nil {
		t.Fatalf("no shard led within 60s of a cancelled start ctx (hosted shards %v)", h.HostedShards())
	}
	pctx, pcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer pcancel()
	sweep := &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{NowMs: time.Now().UnixMilli(), Limit: 1}}}
	if _, err := lead.Proposer.Propose(pctx, sweep); err != nil {
		t.Fatalf("Propose(sweep) after the start ctx was cancelled: %v", err)
	}
}
