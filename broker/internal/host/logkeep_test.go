package host

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/operator"
)

// A shard snapshots every SnapshotEntries entries, and its Raft log keeps
// CompactionOverhead entries behind the snapshot for replicas that fell
// behind: snapshots far more often than the kept tail must not shorten it.
func TestRaftLogKeepsCompactionOverheadBehindSnapshots(t *testing.T) {
	const snapshotEvery, keep, proposals = 10, 100, 160
	raftAddr, grpcAddr := loopbackAddr(t), loopbackAddr(t)
	h, err := New(Config{
		NodeID: 1, RaftAddr: raftAddr, GRPCAddr: grpcAddr, DataDir: t.TempDir(),
		InitialMembers: map[uint64]Member{1: {RaftAddr: raftAddr, GRPCAddr: grpcAddr}},
		RTT:            10 * time.Millisecond, ElectionRTT: 20, HeartbeatRTT: 2,
		SnapshotEntries: snapshotEvery, CompactionOverhead: keep,
		RaftWorkers: 1, RaftLogShards: 1, CacheBytes: 1 << 20, MemTableBytes: 1 << 20,
	}, zaptest.NewLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); err != nil {
		h.Stop()
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	shards := operator.NewShards(h, 1, operator.ShardsConfig{InitialMembers: []uint64{1}, Shards: 1}, zaptest.NewLogger(t), nil)
	shards.Start(t.Context())
	t.Cleanup(shards.Stop)

	var lead *Leading
	var shard uint64
	deadline := time.Now().Add(60 * time.Second)
	for lead == nil && time.Now().Before(deadline) {
		for _, id := range h.HostedShards() {
			if lead, _, _, _ = h.LeaderInfo(id); lead != nil {
				shard = id
				break
			}
		}
		if lead == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if lead == nil {
		t.Fatalf("no shard led within 60s (hosted shards %v)", h.HostedShards())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for range proposals {
		sweep := &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{NowMs: time.Now().UnixMilli(), Limit: 1}}}
		if _, err := lead.Proposer.Propose(ctx, sweep); err != nil {
			t.Fatalf("Propose(sweep): %v", err)
		}
	}
	lr, err := h.nh.GetLogReader(shard)
	if err != nil {
		t.Fatalf("GetLogReader(%d): %v", shard, err)
	}
	// Compaction follows the snapshots in the background: wait until it
	// has dropped the first entries, then look at what it kept.
	first, last := lr.GetRange()
	for first <= snapshotEvery && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		first, last = lr.GetRange()
	}
	if first <= snapshotEvery {
		t.Fatalf("log range = [%d, %d] after %d proposals snapshotting every %d: nothing compacted", first, last, proposals, snapshotEvery)
	}
	if kept := last - first + 1; kept < keep-snapshotEvery {
		t.Fatalf("log range = [%d, %d]: %d entries kept, want at least %d behind the last snapshot", first, last, kept, keep-snapshotEvery)
	}
}
