package fsm

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// ackWith acks attempt 1 of id's default-group copy on r, reading the copy
// in mode, as one run of its own; it returns the bodies the run decoded.
func ackWith(t *testing.T, r *replica, id []byte, mode readMode) int {
	t.Helper()
	b := r.s.db.NewIndexedBatch()
	defer b.Close()
	a := &applier{b: b, shard: shard, index: 99, lows: map[keys.Queue]int64{}, counters: map[counterKey]*fsmpb.Counters{}, groupsOf: map[string][]string{}, endsAt: map[int64][]byte{}}
	refs := []*fsmpb.MessageRef{{MessageId: id, Group: DefaultGroup, Attempt: 1}}
	out, err := a.forEachRef(refs, mode, func(_ int, c *groupCopy) error {
		return a.dropCopy(c, 3000, fsmpb.EndState_END_STATE_DELIVERED)
	})
	if err != nil || out.Codes[0] != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack in mode %d = %v, %v; want OK", mode, out, err)
	}
	if err := a.flushEnds(); err != nil {
		t.Fatal(err)
	}
	if err := a.flushCounters(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	return a.decoded
}

// An ack of a one-copy message reads what deleting it needs by scanning the
// body's encoding, never decoding its payload and headers (issue 10, burst
// drain), and leaves exactly the state that decoding the body leaves: the
// same keys deleted, the same key, end and forget records, the same counters.
func TestAckOfInlineCopyDecodesNoBody(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  *fsmpb.StoredMessage
	}{
		{"plain", &fsmpb.StoredMessage{Payload: bytes.Repeat([]byte("p"), 100), DueAtMs: 2000}},
		{"headers", &fsmpb.StoredMessage{Payload: []byte("x"), Headers: map[string]string{"a": "1", "b": "2"}, DueAtMs: 2000}},
		{"key", &fsmpb.StoredMessage{Payload: []byte("x"), Key: "k1", DueAtMs: 2000}},
		{"ttl", &fsmpb.StoredMessage{Payload: []byte("x"), ExpiresAtMs: 90_000, DueAtMs: 2000}},
		{"all", &fsmpb.StoredMessage{Payload: []byte("x"), Headers: map[string]string{"h": "v"}, Key: "k2", ExpiresAtMs: 90_000, FairnessKey: "f", Priority: -3, DueAtMs: 2000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hashes [2][]byte
			for i, mode := range []readMode{readDecoded, readForDrop} {
				r := newReplica(t)
				id := r.apply(cmdPublish(1000, proto.Clone(tc.msg).(*fsmpb.StoredMessage)))[0].Published[0].MessageId
				if got := r.apply(lease(id, 0, 2000, 5000))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
					t.Fatalf("lease = %v, want OK", got)
				}
				decoded := ackWith(t, r, id, mode)
				if mode == readForDrop && decoded != 0 {
					t.Fatalf("ack decoded %d bodies, want 0", decoded)
				}
				if b, c, d := messageKeys(r); b != 0 || c != 0 || d != 0 {
					t.Fatalf("keys after ack in mode %d: %d bodies, %d copies, %d due; want none", mode, b, c, d)
				}
				hashes[i] = r.hash()
			}
			if !bytes.Equal(hashes[0], hashes[1]) {
				t.Fatalf("state after an ack by scanning = %x, after decoding = %x; want equal", hashes[1], hashes[0])
			}
		})
	}
}
