package integration

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestLaggingReplicaCatchesUpBySnapshot stops a broker, publishes far more
// entries than the shards keep in their logs, restarts it and expects its
// replicas to converge to the others' state (they can only do so from a
// snapshot), and then to serve as leader with every message there.
func TestLaggingReplicaCatchesUpBySnapshot(t *testing.T) {
	c := New(t, Config{Shards: 2, Tune: func(bc *broker.Config) { bc.SnapshotEntries, bc.RaftLogKeepEntries = 20, 10 }})
	const topic = "snap"
	first := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte("0"), DelayMs: 60_000})
	shard := shardOf(t, first[0].MessageId)
	lagging := (c.LeaderOf(shard) + 1) % 3
	c.StopBroker(lagging)
	want := map[string]bool{first[0].MessageId: true}
	for i := 1; i < 200; i++ {
		res := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i)), DelayMs: 500})
		want[res[0].MessageId] = true
	}
	c.StartBroker(lagging)
	Eventually(t, 30*time.Second, func() error {
		var hashes [][]byte
		for i, n := range c.Nodes {
			h, err := n.Server.ShardStateHash(shard)
			if err != nil {
				return fmt.Errorf("broker %d: %w", i+1, err)
			}
			hashes = append(hashes, h)
		}
		if !bytes.Equal(hashes[0], hashes[lagging]) || !bytes.Equal(hashes[1], hashes[lagging]) || !bytes.Equal(hashes[2], hashes[lagging]) {
			return fmt.Errorf("replica states differ")
		}
		return nil
	})
	// Make the caught-up replica part of every quorum: stop another broker.
	c.StopBroker((lagging + 1) % 3)
	c.WaitReady()
	delete(want, first[0].MessageId) // due in a minute
	sub := c.Subscribe(topic, "", 100, 0)
	drain(t, c, sub, want, 30*time.Second)
}
