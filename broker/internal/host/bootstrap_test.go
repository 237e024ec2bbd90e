package host

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/meta"
)

// A fresh cluster's first shards go the way of every added shard: the
// meta leader's shard decisions (operator.Shards, beside each host as in a
// broker) propose them (add_shards, once all three initial members
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
			st := h.MetaClient().Meta()
			if len(st.Shards) != 2 || len(st.RingShards()) != 2 || st.ClusterID == "" {
				return fmt.Errorf("node %d: shards %v, ring %v, cluster id %q; want 2 on the ring, named", id, st.ShardIDs(), st.RingShards(), st.ClusterID)
			}
			for _, sid := range st.ShardIDs() {
				sh := st.Shards[sid]
				if sh.State != meta.ShardServing || len(sh.Replicas) != 3 {
					return fmt.Errorf("node %d: shard %d state %q with %d replicas, want %q (set by serve_shards) with 3", id, sid, sh.State, len(sh.Replicas), meta.ShardServing)
				}
			}
			if len(h.Replicas().HostedShards()) != 2 {
				return fmt.Errorf("node %d hosts %v, want 2 shards", id, h.Replicas().HostedShards())
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
// leader's shard decisions never bootstrap); the test proposes the old command
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
		st := hosts[1].MetaClient().Meta()
		if st.Nodes[1] == nil || st.Nodes[2] == nil {
			return fmt.Errorf("registered nodes %v, want 1 and 2", st.NodeIDs())
		}
		return nil
	})
	poll(t, 30*time.Second, func() error {
		code, _, err := hosts[1].MetaClient().ProposeMeta(t.Context(), &meta.Command{Op: meta.OpBootstrapShards, Count: 2, RF: 2, ClusterID: "old"})
		if err == nil && code != meta.ResultOK && code != meta.ResultNoop { // Noop: a retry after a commit not seen
			t.Fatalf("bootstrap_shards = %d, want ResultOK", code)
		}
		return err
	})
	serving := func(id uint64) error {
		h := hosts[id]
		st := h.MetaClient().Meta()
		if len(st.Shards) != 2 || len(st.RingShards()) != 2 || len(st.StartingShards()) != 0 {
			return fmt.Errorf("node %d: shards %v, ring %v, starting %v; want 2 serving", id, st.ShardIDs(), st.RingShards(), st.StartingShards())
		}
		for _, sid := range st.ShardIDs() {
			if s := st.Shards[sid].State; s != "" {
				return fmt.Errorf("node %d: shard %d state %q, want none (the old bootstrap's)", id, sid, s)
			}
		}
		if len(h.Replicas().HostedShards()) != 2 {
			return fmt.Errorf("node %d hosts %v, want 2 shards", id, h.Replicas().HostedShards())
		}
		for _, sid := range h.Replicas().HostedShards() {
			if h.Replicas().ShardLeader(sid) == 0 {
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
		a, _ := json.Marshal(hosts[1].MetaClient().Meta())
		b, _ := json.Marshal(hosts[2].MetaClient().Meta())
		if string(a) != string(b) {
			return fmt.Errorf("restarted node 1 meta state %s, node 2 %s; want equal", a, b)
		}
		return nil
	})
}

// The hosts only register and run their replicas: the first shards are
// created, and served, by the operator on the meta leader, and a meta
// leader lost between the two leaves its successor to serve them. Three
// hosts with no shard decisions running; once all registered, the meta
// leader's decisions run one round by hand (the first shards are created,
// starting), the shards elect leaders and stay starting (no host serves
// them), the meta leader's host stops, and the two others run their
// decisions: the new meta leader puts the shards on the ring.
func TestNewMetaLeaderServesTheFirstShards(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts")
	}
	c := newTestCluster(t, 3, 2, 3)
	c.noShards = true
	hosts := map[uint64]*Host{}
	defer func() {
		for _, h := range hosts {
			h.Stop()
		}
	}()
	for id := uint64(1); id <= 3; id++ {
		hosts[id] = c.start(id)
	}
	read := func(h *Host) (*meta.State, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return h.MetaClient().ReadMeta(ctx)
	}
	var leader uint64
	poll(t, 60*time.Second, func() error {
		leader = hosts[1].MetaClient().MetaLeader()
		if hosts[leader] == nil {
			return fmt.Errorf("no meta leader known")
		}
		st, err := read(hosts[leader])
		if err != nil {
			return err
		}
		if len(st.Nodes) != 3 {
			return fmt.Errorf("registered nodes %v, want 1, 2 and 3", st.NodeIDs())
		}
		return nil
	})
	if st, err := read(hosts[leader]); err != nil || len(st.Shards) != 0 {
		t.Fatalf("with every member registered and no shard decisions run, meta shards = %v (err %v), want none: hosts create no shards", st.ShardIDs(), err)
	}

	first := c.shardDecisions(hosts[leader], zaptest.NewLogger(t).Named("decisions"))
	poll(t, 30*time.Second, func() error {
		first.Step(t.Context())
		st, err := read(hosts[leader])
		if err != nil {
			return err
		}
		if len(st.Shards) != 2 || st.ClusterID == "" {
			return fmt.Errorf("after a round on meta leader %d: shards %v, cluster id %q; want 2, named", leader, st.ShardIDs(), st.ClusterID)
		}
		return nil
	})
	poll(t, 60*time.Second, func() error {
		for id, h := range hosts {
			if got := h.Replicas().HostedShards(); len(got) != 2 {
				return fmt.Errorf("node %d hosts shards %v, want 2", id, got)
			}
			for _, sid := range h.MetaClient().Meta().ShardIDs() {
				if h.Replicas().ShardLeader(uint64(sid)) == 0 {
					return fmt.Errorf("node %d knows no leader of shard %d", id, sid)
				}
			}
		}
		return nil
	})
	st, err := read(hosts[leader])
	if err != nil {
		t.Fatal(err)
	}
	if got := st.StartingShards(); len(got) != 2 {
		t.Fatalf("with leaders elected and no further round: starting shards %v (ring %v), want both starting: hosts serve no shards", got, st.RingShards())
	}

	hosts[leader].Stop()
	delete(hosts, leader)
	for id, h := range hosts {
		s := c.shardDecisions(h, zaptest.NewLogger(t).Named(fmt.Sprint("decisions-", id)))
		s.Start(t.Context())
		defer s.Stop()
	}
	poll(t, 60*time.Second, func() error {
		for id, h := range hosts {
			st := h.MetaClient().Meta()
			if len(st.RingShards()) != 2 || len(st.StartingShards()) != 0 {
				return fmt.Errorf("node %d: ring %v, starting %v; want both shards on the ring", id, st.RingShards(), st.StartingShards())
			}
			if h.MetaClient().MetaLeader() == leader {
				return fmt.Errorf("node %d still sees stopped node %d lead meta", id, leader)
			}
		}
		return nil
	})
}
