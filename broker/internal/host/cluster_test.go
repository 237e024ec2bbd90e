package host

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/meta"
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

// startAll runs the hosts of every member and stops, when the test ends,
// the hosts the returned map holds then: a test that stops a host deletes
// it from the map, and puts the restarted one back.
func (c *testCluster) startAll() map[uint64]*Host {
	c.t.Helper()
	hosts := map[uint64]*Host{}
	c.t.Cleanup(func() {
		for _, h := range hosts {
			h.Stop()
		}
	})
	for id := uint64(1); id <= uint64(len(c.members)); id++ {
		hosts[id] = c.start(id)
	}
	return hosts
}

// proposeSweep proposes one sweep command to shard through whichever of
// hosts leads it, retrying until a leader takes it: an entry in the
// shard's log and a write to every replica's state DB.
func proposeSweep(t *testing.T, hosts map[uint64]*Host, shard uint64) {
	t.Helper()
	poll(t, 30*time.Second, func() error {
		for _, h := range hosts {
			if lead, _, _, _ := h.Replicas().LeaderInfo(shard); lead != nil {
				pctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				_, err := lead.Proposer.Propose(pctx, &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{NowMs: time.Now().UnixMilli(), Limit: 1}}})
				cancel()
				if err == nil {
					return nil
				}
			}
		}
		return fmt.Errorf("no leader of shard %d took a proposal", shard)
	})
}

// submitOperation submits op to the meta group through via, retrying
// until it is accepted, and answers the operation's id.
func submitOperation(t *testing.T, via *Host, op meta.Operation) meta.OperationID {
	t.Helper()
	var opID meta.OperationID
	pollAttempts(t, 60*time.Second, func(ctx context.Context) error {
		code, data, err := via.MetaClient().ProposeMeta(ctx, &meta.Command{Op: meta.OpSubmitOperations, Operations: []meta.Operation{op}})
		if err != nil || code != meta.ResultOK {
			return fmt.Errorf("submit = %d: %w", code, err)
		}
		var ids []meta.OperationID
		if err := json.Unmarshal(data, &ids); err != nil || len(ids) != 1 {
			return fmt.Errorf("submit answered %q", data)
		}
		opID = ids[0]
		return nil
	})
	return opID
}

// shardsHost is the host as the shard decisions see it, composed as the
// broker composes it.
type shardsHost struct {
	*MetaClient
	*Replicas
}

// shardDecisions are the operator's shard decisions of member h, as its
// broker's executor runs them; Step runs one round.
func (c *testCluster) shardDecisions(h *Host, log *zap.Logger) *operator.Shards {
	return operator.NewShards(shardsHost{h.MetaClient(), h.Replicas()}, h.MetaClient().NodeID(), operator.ShardsConfig{
		InitialMembers: slices.Sorted(maps.Keys(c.members)), Shards: c.shards, ReplicationFactor: c.rf,
		Poll: 100 * time.Millisecond,
	}, log, nil)
}
