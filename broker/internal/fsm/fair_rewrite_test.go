package fsm

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// A rewrite moves the copy's fairness key and its fair-index entry with the
// body's, so a FAIR topic serves the message under its new key only.
func TestRewriteMovesTheFairnessKey(t *testing.T) {
	r := newReplica(t)
	first := &fsmpb.StoredMessage{Key: "k", Payload: []byte("a"), DueAtMs: 500, Fair: true, FairnessKey: "tenant-a"}
	id := r.apply(cmdPublish(100, first))[0].Published[0].MessageId
	second := &fsmpb.StoredMessage{Key: "k", Payload: []byte("b"), DueAtMs: 600, Fair: true, FairnessKey: "tenant-b", OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_REPLACE}
	if got := r.apply(cmdPublish(200, second))[0].Published[0]; got.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_REPLACED {
		t.Fatalf("replace = %v, want REPLACED", got)
	}
	if cs := r.copyOf(id, DefaultGroup); cs.FairnessKey != "tenant-b" {
		t.Fatalf("copy fairness key = %q, want tenant-b", cs.FairnessKey)
	}
	q := keys.Queue{Topic: "t", Partition: 0, Group: DefaultGroup}
	if r.has(keys.Fair(shard, q, "tenant-a", 500, 0, id)) || r.has(keys.Fair(shard, q, "tenant-a", 600, 0, id)) {
		t.Fatalf("fair index still holds the copy under tenant-a")
	}
	if !r.has(keys.Fair(shard, q, "tenant-b", 600, 0, id)) {
		t.Fatalf("fair index has no entry under tenant-b at 600")
	}
	// Delivered and acked, the copy leaves no fair-index entry behind.
	if code := r.apply(leaseAt(id, 0, 600, r.body(id).Version, 600, 5000))[0].Codes[0]; code != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("lease = %v, want OK", code)
	}
	r.apply(ack(id, 1))
	prefix := keys.FairPrefix(shard, q)
	it, err := r.s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("fair index entry %q left after the ack", it.Key())
	}
}
