package host

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"

	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/meta"
)

func poll(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pollAttempts is poll for checks that call into the cluster: each
// attempt gets its own deadline of attemptTimeout, so one call stuck behind
// an election or a lost request is retried (and its error reported) rather
// than spending the whole bound.
func pollAttempts(t *testing.T, timeout time.Duration, check func(ctx context.Context) error) {
	t.Helper()
	poll(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
		defer cancel()
		return check(ctx)
	})
}

// attemptTimeout bounds one attempt of pollAttempts.
const attemptTimeout = 10 * time.Second

// A replica removed from a node while the node was stopped (as repairs do
// to a dead node's replicas) leaves nothing on that node's disk once it
// restarts and runs nothing: its Raft data and its shard's keys are gone,
// and its delete-data step is reported. Three hosts in one process, one
// shard of three replicas; node 3 is stopped, its replica removed
// (membership and meta state), node 3 restarted on its data dir. (The
// restarted node first replays a meta state that still places the replica,
// starts it, then drops it with dropUnplaced once its meta replica catches
// up.)
func TestReplicaRemovedWhileDownLeavesNoData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts")
	}
	c := newTestCluster(t, 3, 1, 3)
	hosts := c.startAll()
	var shard uint64
	poll(t, 60*time.Second, func() error {
		for id, h := range hosts {
			if len(h.Replicas().HostedShards()) != 1 {
				return fmt.Errorf("node %d hosts %v", id, h.Replicas().HostedShards())
			}
			shard = h.Replicas().HostedShards()[0]
			if h.Replicas().ShardLeader(shard) == 0 {
				return fmt.Errorf("node %d knows no leader of shard %d", id, shard)
			}
		}
		return nil
	})
	onDisk := func(h *Host) (raft bool, keyCount int) {
		info := h.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{})
		raft = slices.ContainsFunc(info.LogInfo, func(ni raftio.NodeInfo) bool { return ni.ShardID == shard })
		it, err := h.db.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(shard), UpperBound: keys.ShardEnd(shard)})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			keyCount++
		}
		return raft, keyCount
	}
	// One command through the leader, so every replica's state DB holds
	// keys of the shard (its applied index at least).
	proposeSweep(t, hosts, shard)
	poll(t, 30*time.Second, func() error {
		if raft, n := onDisk(hosts[3]); !raft || n == 0 {
			return fmt.Errorf("node 3 before the stop: raft data %v, %d keys of shard %d; want both", raft, n, shard)
		}
		return nil
	})

	hosts[3].Stop()
	delete(hosts, 3)
	// Generous bounds: a meta election after node 3's stop under -race on
	// a loaded 2-core machine took CI past 30 s once.
	st := hosts[1].MetaClient().Meta()
	r3, _ := st.Shards[meta.EventShardID(shard)].ReplicaOn(3)
	pollAttempts(t, 60*time.Second, func(ctx context.Context) error { return hosts[1].Moves().RemoveReplica(ctx, shard, uint64(r3.ID)) })
	opID := submitOperation(t, hosts[1], meta.NewRemoveReplica(meta.EventShardID(shard), 3, 0, false, "test", meta.DefaultStepTimeouts()))
	pollAttempts(t, 60*time.Second, func(ctx context.Context) error {
		_, _, err := hosts[1].MetaClient().ProposeMeta(ctx, &meta.Command{Op: meta.OpAdvanceOperation, OperationID: opID, Step: 0})
		return err
	})

	hosts[3] = c.start(3)
	poll(t, 60*time.Second, func() error {
		op := hosts[3].MetaClient().Meta().Operations[opID]
		if op == nil || op.Status != meta.OperationDone {
			return fmt.Errorf("operation %d on node 3's meta: %+v, want done (delete-data reported)", opID, op)
		}
		return nil
	})
	if raft, n := onDisk(hosts[3]); raft || n != 0 {
		t.Fatalf("node 3 restarted after its replica was removed: raft data %v, %d keys of shard %d left; want none", raft, n, shard)
	}
	if got := hosts[3].Replicas().HostedShards(); len(got) != 0 {
		t.Fatalf("node 3 hosts %v, want nothing", got)
	}
}
