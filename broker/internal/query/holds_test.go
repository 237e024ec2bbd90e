package query

import (
	"testing"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/proto/ring"
)

// A partition is held while a copy waits or is in flight, and its keys
// while pending or remembered for their dedup window; other partitions
// are not.
func TestHolds(t *testing.T) {
	r := newRig(t)
	r.group("t", fsm.DefaultGroup)
	const parts = 4
	key := "k1"
	kp := ring.KeyPartition(key, parts)
	other := (kp + 1) % parts
	ids := r.publish(msg("a", other, 1000), &fsmpb.StoredMessage{Payload: []byte("b"), Partition: kp, DueAtMs: 1000, Key: key, DedupWindowMs: 60000})
	check := func(when string, part uint32, wantCopies, wantKeys bool) {
		t.Helper()
		q := New(r.db, shard, 1000)
		copies, err := q.HoldsCopies("t", part)
		if err != nil {
			t.Fatalf("HoldsCopies() error = %v", err)
		}
		keyed, err := q.HoldsKeys("t", part, parts)
		if err != nil {
			t.Fatalf("HoldsKeys() error = %v", err)
		}
		if copies != wantCopies || keyed != wantKeys {
			t.Fatalf("%s: HoldsCopies(t, %d), HoldsKeys(t, %d) = %v, %v, want %v, %v", when, part, part, copies, keyed, wantCopies, wantKeys)
		}
	}
	check("published", other, true, false)
	check("published", kp, true, true)
	check("empty partition", (kp+2)%parts, false, false)
	r.lease(ids[0], 1000, 5000)
	check("in flight", other, true, false)
	r.ack(ids[0], 1)
	check("acked", other, false, false)
	r.lease(ids[1], 1000, 5000)
	r.ack(ids[1], 1)
	check("keyed acked, key remembered", kp, false, true)
}

func TestDedupDigest(t *testing.T) {
	r := newRig(t)
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: &fsmpb.Publish{
		RequestId: "req-1", Digest: []byte("d1"), NowMs: 1000, Messages: []*fsmpb.StoredMessage{msg("a", 0, 1000)},
	}}})
	q := New(r.db, shard, 1000)
	if d, ok, err := q.DedupDigest("req-1"); err != nil || !ok || string(d) != "d1" {
		t.Fatalf("DedupDigest(req-1) = %q, %v, %v, want d1, true", d, ok, err)
	}
	if _, ok, err := q.DedupDigest("req-2"); err != nil || ok {
		t.Fatalf("DedupDigest(req-2) = _, %v, %v, want not found", ok, err)
	}
}
