package host

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A shard snapshots every SnapshotEntries entries, and its Raft log keeps
// CompactionOverhead entries behind the snapshot for replicas that fell
// behind: snapshots far more often than the kept tail must not shorten it.
func TestRaftLogKeepsCompactionOverheadBehindSnapshots(t *testing.T) {
	const snapshotEvery, keep, proposals = 10, 100, 160
	h := startOneBrokerHost(t.Context(), t, prometheus.NewRegistry(), func(c *Config) {
		c.SnapshotEntries, c.CompactionOverhead = snapshotEvery, keep
	})
	shard, lead := waitShardLeader(t, h)
	proposeSweeps(t, lead, proposals)
	lr, err := h.nh.GetLogReader(shard)
	if err != nil {
		t.Fatalf("GetLogReader(%d): %v", shard, err)
	}
	// Compaction follows the snapshots in the background: wait until it
	// has dropped the first entries, then look at what it kept.
	first, last := lr.GetRange()
	deadline := time.Now().Add(30 * time.Second)
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
