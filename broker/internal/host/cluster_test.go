package host

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/operator"
)

// testCluster is n initial members on loopback addresses, each with its
// own data dir, bootstrapping shards event shards of rf replicas; start
// runs one member's host on its data dir (again after a Stop: a restart),
// with the operator's shard decisions beside it as a broker runs them
// (the meta leader's creates the first shards and serves them), unless
// noShards is set.
type testCluster struct {
	t         *testing.T
	members   map[uint64]Member
	dirs      map[uint64]string
	shards    int
	rf        int
	snapshots uint64
	noShards  bool
}

func newTestCluster(t *testing.T, n, shards, rf int) *testCluster {
	t.Helper()
	c := &testCluster{t: t, members: map[uint64]Member{}, dirs: map[uint64]string{}, shards: shards, rf: rf, snapshots: 1000}
	for id := uint64(1); id <= uint64(n); id++ {
		c.members[id] = Member{RaftAddr: loopbackAddr(t), GRPCAddr: loopbackAddr(t)}
		c.dirs[id] = t.TempDir()
	}
	return c
}

// start runs member id's host, failing the test if it cannot start.
func (c *testCluster) start(id uint64) *Host {
	c.t.Helper()
	log := zaptest.NewLogger(c.t).Named(fmt.Sprint("node-", id))
	h, err := New(Config{
		NodeID: id, RaftAddr: c.members[id].RaftAddr, GRPCAddr: c.members[id].GRPCAddr, DataDir: c.dirs[id],
		InitialMembers: c.members,
		RTT:            10 * time.Millisecond, ElectionRTT: 20, HeartbeatRTT: 2, SnapshotEntries: c.snapshots,
		RaftWorkers: 1, RaftLogShards: 1, CacheBytes: 1 << 20, MemTableBytes: 1 << 20,
	}, log, prometheus.NewRegistry())
	if err != nil {
		c.t.Fatal(err)
	}
	if err := h.Start(c.t.Context()); err != nil {
		h.Stop()
		c.t.Fatal(err)
	}
	if !c.noShards {
		// A loop outliving its host (the test stopped it) finds no meta
		// leader there and does nothing.
		s := c.shardDecisions(h, log)
		s.Start(c.t.Context())
		c.t.Cleanup(s.Stop)
	}
	return h
}

// shardDecisions are the operator's shard decisions of member h, as its
// broker's executor runs them; Step runs one round.
func (c *testCluster) shardDecisions(h *Host, log *zap.Logger) *operator.Shards {
	return operator.NewShards(h, h.NodeID(), operator.ShardsConfig{
		InitialMembers: slices.Sorted(maps.Keys(c.members)), Shards: c.shards, ReplicationFactor: c.rf,
		Poll: 100 * time.Millisecond,
	}, log, nil)
}
