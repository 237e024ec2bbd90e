package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/proto/ring"
)

func cmdFence(topic string, partition, partitions uint32, lift bool) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Fence{Fence: &fsmpb.Fence{Topic: topic, Partition: partition, Partitions: partitions, Lift: lift}}}
}

// keyOn is a key whose partition of n is p.
func keyOn(t *testing.T, p, n uint32) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprint("k", i); ring.KeyPartition(k, n) == p {
			return k
		}
	}
	t.Fatalf("no key found for partition %d of %d", p, n)
	return ""
}

// A hand-over fence is a Raft entry: it is set only while the shard holds
// no key record of the partition, and a keyed publish applied after it
// (one the service accepted under the open hand-over, committed after the
// hand-over check) is refused whole, writing nothing, so its key cannot
// land on the old shard once meta moves keyed work to the new one.
// Unkeyed publishes and other partitions are not fenced; a lift or the
// topic's removal ends the fence; replicas hash equal throughout.
func TestFenceRefusesKeyedPublishesAppliedAfterIt(t *testing.T) {
	const n = 4
	onOne, onTwo := keyOn(t, 1, n), keyOn(t, 2, n)
	keyed := func(topic, key string, p uint32) *fsmpb.Command {
		return cmdPublish(10, &fsmpb.StoredMessage{Topic: topic, Partition: p, Key: key, DueAtMs: 50})
	}
	a, b := newReplica(t), newReplica(t)
	both := func(cmds ...*fsmpb.Command) []*fsmpb.Outcome {
		t.Helper()
		got := a.apply(cmds...)
		b.apply(cmds...)
		return got
	}

	both(keyed("t", onTwo, 2))
	if out := both(cmdFence("t", 2, n, false))[0]; !out.GetKeysHeld() {
		t.Fatalf("fence of a partition holding a key record = %v, want keys_held", out)
	}
	if out := both(keyed("t", onTwo+"x", ring.KeyPartition(onTwo+"x", n)))[0]; out.GetFenced() != nil {
		t.Fatalf("keyed publish after a refused fence = %v, want it stored", out)
	}

	if out := both(cmdFence("t", 1, n, false))[0]; out.GetKeysHeld() || out.GetFenced() != nil {
		t.Fatalf("fence of a partition without key records = %v, want it set", out)
	}
	for _, tc := range []struct {
		name   string
		cmd    *fsmpb.Command
		fenced bool
	}{
		{"keyed, fenced partition", keyed("t", onOne, 1), true},
		{"keyed, its dead-letter topic", keyed("t.dlq", onOne, 1), true},
		{"a batch with one keyed message there", cmdPublish(10, &fsmpb.StoredMessage{Topic: "t", Partition: 1, DueAtMs: 50}, &fsmpb.StoredMessage{Topic: "t", Partition: 1, Key: onOne, DueAtMs: 50}), true},
		{"unkeyed, fenced partition", cmdPublish(10, &fsmpb.StoredMessage{Topic: "t", Partition: 1, DueAtMs: 50}), false},
		{"keyed, another partition", keyed("t", onTwo+"y", ring.KeyPartition(onTwo+"y", n)), false},
		{"keyed, another topic", keyed("u", onOne, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.keyCount()
			out := both(tc.cmd)[0]
			want := &fsmpb.FencedPartition{Topic: "t", Partition: 1}
			switch {
			case tc.fenced && !proto.Equal(out.GetFenced(), want):
				t.Fatalf("publish = %v, want fenced %v", out, want)
			case tc.fenced && (len(out.GetPublished()) != 0 || a.keyCount() != before):
				t.Fatalf("fenced publish answered %v and wrote %d keys, want nothing", out, a.keyCount()-before)
			case !tc.fenced && (out.GetFenced() != nil || len(out.GetPublished()) == 0):
				t.Fatalf("publish = %v, want it stored", out)
			}
		})
	}

	if out := both(cmdFence("t", 1, n, true))[0]; out.GetKeysHeld() {
		t.Fatalf("lift = %v", out)
	}
	if out := both(keyed("t", onOne, 1))[0]; out.GetFenced() != nil || len(out.GetPublished()) != 1 {
		t.Fatalf("keyed publish after the lift = %v, want it stored", out)
	}

	both(cmdFence("t", 3, n, false))
	both(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Delete: true}}})
	if out := both(keyed("t", keyOn(t, 3, n), 3))[0]; out.GetFenced() != nil {
		t.Fatalf("keyed publish to a topic created again = %v, want no fence left from the deleted one", out)
	}
	if !bytes.Equal(a.hash(), b.hash()) {
		t.Fatal("replicas hash differently")
	}
}
