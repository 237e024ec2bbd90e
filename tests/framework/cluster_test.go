package framework

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestClusterForwardsAndIsolates starts three brokers behind forwarders,
// checks the forwarders know who dialled them, isolates the leader of the
// first shard and sees another broker take over, then heals and waits for
// every shard's replicas to answer one state hash (G7).
func TestClusterForwardsAndIsolates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := NewCluster(t, Config{Shards: 2, LogLevel: "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Publish(ctx, &sundialv1.Message{Topic: "fw", Payload: []byte("x")}); err != nil {
		t.Fatalf("Publish = %v", err)
	}
	// Dragonboat dials a peer only to send to it, so every broker's Raft
	// forwarder has connections, each traced to a broker other than itself.
	for _, b := range c.Brokers {
		WaitFor(t, 30*time.Second, func() error {
			src := b.raftFwd.Sources()
			if len(src) == 0 {
				return fmt.Errorf("%s raft forwarder has no connections", b.Name)
			}
			for _, s := range src {
				if s == b.Name || !slices.ContainsFunc(c.Brokers, func(o *Broker) bool { return o.Name == s }) {
					return fmt.Errorf("%s raft forwarder sources %q: want other brokers only", b.Name, src)
				}
			}
			return nil
		})
	}
	shards, err := c.ShardIDs(t.Context())
	if err != nil || len(shards) == 0 {
		t.Fatalf("ShardIDs() = %v, %v", shards, err)
	}
	shard := shards[0]
	leader, err := c.LeaderOf(shard)
	if err != nil || leader == 0 {
		t.Fatalf("LeaderOf(%d) = %d, %v", shard, leader, err)
	}
	c.Isolate(leader)
	WaitFor(t, 60*time.Second, func() error {
		l, err := c.LeaderOf(shard)
		if err != nil {
			return err
		}
		if l == leader || l == 0 {
			return fmt.Errorf("shard %d leader still %d", shard, l)
		}
		return nil
	})
	c.Heal()
	if err := c.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	// G7: after the partition heals, every shard's replicas hash equal.
	WaitFor(t, 60*time.Second, c.ReplicasAgree)
}
