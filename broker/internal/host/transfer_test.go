package host

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A leadership transfer asked of a follower is refused with the leader's
// node and address, and queues nothing: Dragonboat would forward it to the
// leader, whose dispatcher would keep its leader lease (only the leader's
// own TransferLeadership ends it) while the target, elected at once,
// already serves. The leader's own host queues it.
func TestTransferLeadershipOnlyOnTheLeadersHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NodeHosts")
	}
	c := newTestCluster(t, 3, 1, 3)
	hosts := c.startAll()
	var shard, leader uint64
	poll(t, 60*time.Second, func() error {
		for id, h := range hosts {
			if len(h.Replicas().HostedShards()) != 1 {
				return fmt.Errorf("node %d hosts %v", id, h.Replicas().HostedShards())
			}
			shard = h.Replicas().HostedShards()[0]
		}
		for id, h := range hosts {
			if lead, _, _, _ := h.Replicas().LeaderInfo(shard); lead != nil {
				leader = id
			}
		}
		for id, h := range hosts {
			if _, node, _, _ := h.Replicas().LeaderInfo(shard); node != leader || leader == 0 {
				return fmt.Errorf("node %d sees node %d lead shard %d, the leading host is %d", id, node, shard, leader)
			}
		}
		return nil
	})
	var follower, target uint64
	for id := range hosts {
		switch {
		case id == leader:
		case follower == 0:
			follower = id
		default:
			target = id
		}
	}

	err := hosts[follower].Moves().TransferLeadership(t.Context(), shard, target)
	var nl *NotShardLeaderError
	if !errors.As(err, &nl) {
		t.Fatalf("node %d (a follower) TransferLeadership(%d, %d) = %v, want a *NotShardLeaderError", follower, shard, target, err)
	}
	if nl.Shard != shard || nl.Leader != leader || nl.LeaderAddr != c.members[leader].GRPCAddr {
		t.Errorf("follower's refusal = %+v, want shard %d led by node %d at %s", nl, shard, leader, c.members[leader].GRPCAddr)
	}

	if err := hosts[leader].Moves().TransferLeadership(t.Context(), shard, target); err != nil {
		t.Fatalf("node %d (the leader) TransferLeadership(%d, %d) = %v", leader, shard, target, err)
	}
	poll(t, 60*time.Second, func() error {
		if lead, _, _, _ := hosts[target].Replicas().LeaderInfo(shard); lead == nil {
			return fmt.Errorf("node %d does not lead shard %d yet", target, shard)
		}
		return nil
	})
}
