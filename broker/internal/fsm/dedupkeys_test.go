package fsm

import (
	"testing"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// tagsOf counts the shard's keys by tag (the byte after the shard prefix).
func tagsOf(r *replica) map[byte]int {
	r.t.Helper()
	it, err := r.s.db.NewIter(nil)
	if err != nil {
		r.t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	prefix := keys.ShardPrefix(shard)
	tags := map[byte]int{}
	for valid := it.SeekGE(prefix); valid && len(it.Key()) > len(prefix) && string(it.Key()[:len(prefix)]) == string(prefix); valid = it.Next() {
		tags[it.Key()[len(prefix)]]++
	}
	return tags
}

// A publish without a request id writes no dedup record ('r') and no entry
// in the dedup age index ('q'): only one with a request id can be answered
// again, so only it pays for them (issue 10).
func TestPublishWithoutRequestIDWritesNoDedupRecord(t *testing.T) {
	const dedup, dedupAt = 'r', 'q'
	r := newReplica(t)
	r.apply(publish("", 1, 10, 20, 30))
	if got := tagsOf(r); got[dedup] != 0 || got[dedupAt] != 0 {
		t.Fatalf("keys after a publish without request id: %d dedup, %d dedup-age; want 0, 0", got[dedup], got[dedupAt])
	}
	r.apply(publish("req-1", 2, 40))
	if got := tagsOf(r); got[dedup] != 1 || got[dedupAt] != 1 {
		t.Fatalf("keys after a publish with a request id: %d dedup, %d dedup-age; want 1, 1", got[dedup], got[dedupAt])
	}
}
