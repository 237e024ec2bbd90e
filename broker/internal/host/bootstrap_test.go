package host

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sundialmq/sundial/meta"
)

// A fresh cluster's first shards go the way of every added shard: the
// meta leader proposes them (add_shards, once all three initial members
// registered), they start off the ring, and serve_shards puts them on it
// once each has a leader, which is the only command that stores the
// serving state (the old bootstrap stored none). Three hosts, two shards of
// three replicas.
func TestFirstShardsStartThenServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts")
	}
	c := newTestCluster(t, 3, 2, 3)
	hosts := map[uint64]*Host{}
	defer func() {
		for _, h := range hosts {
			h.Stop()
		}
	}()
	for id := uint64(1); id <= 3; id++ {
		hosts[id] = c.start(id)
	}
	poll(t, 60*time.Second, func() error {
		for id, h := range hosts {
			st := h.Meta()
			if len(st.Shards) != 2 || len(st.RingShards()) != 2 || st.ClusterID == "" {
				return fmt.Errorf("node %d: shards %v, ring %v, cluster id %q; want 2 on the ring, named", id, st.ShardIDs(), st.RingShards(), st.ClusterID)
			}
			for _, sid := range st.ShardIDs() {
				sh := st.Shards[sid]
				if sh.State != meta.ShardServing || len(sh.Replicas) != 3 {
					return fmt.Errorf("node %d: shard %d state %q with %d replicas, want %q (set by serve_shards) with 3", id, sid, sh.State, len(sh.Replicas), meta.ShardServing)
				}
			}
			if len(h.HostedShards()) != 2 {
				return fmt.Errorf("node %d hosts %v, want 2 shards", id, h.HostedShards())
			}
		}
		return nil
	})
}

// A data dir bootstrapped the old way (bootstrap_shards in the meta log:
// shards serving at once, with no state) keeps working with no migration:
// its shards start, elect leaders and stay on the ring, and a node
// restarted on it replays that log to the same meta state as its peer.
// Two hosts of three initial members (node 3 never starts, so the meta
// leader never bootstraps on its own); the test proposes the old command
// as the brokers before add_shards did.
func TestOldBootstrapDataDirKeepsServing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two NodeHosts")
	}
	c := newTestCluster(t, 3, 2, 2)
	start := c.start
	hosts := map[uint64]*Host{1: start(1), 2: start(2)}
	defer func() {
		for _, h := range hosts {
			h.Stop()
		}
	}()
	poll(t, 60*time.Second, func() error {
		st := hosts[1].Meta()
		if st.Nodes[1] == nil || st.Nodes[2] == nil {
			return fmt.Errorf("registered nodes %v, want 1 and 2", st.NodeIDs())
		}
		return nil
	})
	poll(t, 30*time.Second, func() error {
		code, _, err := hosts[1].ProposeMeta(t.Context(), &meta.Command{Op: meta.OpBootstrapShards, Count: 2, RF: 2, ClusterID: "old"})
		if err == nil && code != meta.ResultOK && code != meta.ResultNoop { // Noop: a retry after a commit not seen
			t.Fatalf("bootstrap_shards = %d, want ResultOK", code)
		}
		return err
	})
	serving := func(id uint64) error {
		h := hosts[id]
		st := h.Meta()
		if len(st.Shards) != 2 || len(st.RingShards()) != 2 || len(st.StartingShards()) != 0 {
			return fmt.Errorf("node %d: shards %v, ring %v, starting %v; want 2 serving", id, st.ShardIDs(), st.RingShards(), st.StartingShards())
		}
		for _, sid := range st.ShardIDs() {
			if s := st.Shards[sid].State; s != "" {
				return fmt.Errorf("node %d: shard %d state %q, want none (the old bootstrap's)", id, sid, s)
			}
		}
		if len(h.HostedShards()) != 2 {
			return fmt.Errorf("node %d hosts %v, want 2 shards", id, h.HostedShards())
		}
		for _, sid := range h.HostedShards() {
			if h.ShardLeader(sid) == 0 {
				return fmt.Errorf("node %d knows no leader of shard %d", id, sid)
			}
		}
		return nil
	}
	poll(t, 60*time.Second, func() error {
		for id := range hosts {
			if err := serving(id); err != nil {
				return err
			}
		}
		return nil
	})

	hosts[1].Stop()
	hosts[1] = start(1)
	poll(t, 60*time.Second, func() error {
		if err := serving(1); err != nil {
			return err
		}
		a, _ := json.Marshal(hosts[1].Meta())
		b, _ := json.Marshal(hosts[2].Meta())
		if string(a) != string(b) {
			return fmt.Errorf("restarted node 1 meta state %s, node 2 %s; want equal", a, b)
		}
		return nil
	})
}
