package query

import (
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/proto/ring"
)

// HoldsKeys reports whether the shard has a key record (a pending key or
// a completed one still remembered for its dedup window) on partition of
// topic, which has partitions partitions. It examines at most
// MaxStatsExamined records and answers true when it runs out.
func (r *Reader) HoldsKeys(topic string, partition, partitions uint32) (bool, error) {
	prefix := keys.Key(r.shard, topic, "")
	found, examined := false, 0
	err := r.each(prefix, keys.PrefixEnd(prefix), func(k, _ []byte) (bool, error) {
		examined++
		if examined > MaxStatsExamined || ring.KeyPartition(keys.KeyOfRecord(r.shard, topic, k), partitions) == partition {
			found = true
			return false, nil
		}
		return true, nil
	})
	return found, err
}

// HoldsCopies reports whether the shard has a copy of a message on
// partition of topic in any group, waiting or in flight (the due index
// holds both, the fair index the copies of FAIR topics).
func (r *Reader) HoldsCopies(topic string, partition uint32) (bool, error) {
	for _, prefix := range [][]byte{keys.PartitionDuePrefix(r.shard, topic, partition), keys.PartitionFairPrefix(r.shard, topic, partition)} {
		found := false
		if err := r.each(prefix, keys.PrefixEnd(prefix), func(_, _ []byte) (bool, error) {
			found = true
			return false, nil
		}); err != nil || found {
			return found, err
		}
	}
	return false, nil
}

// DedupDigest is the digest of the publish or change recorded under
// requestID, and whether one is recorded (within the dedup window).
func (r *Reader) DedupDigest(requestID string) ([]byte, bool, error) {
	var rec fsmpb.DedupRecord
	found, err := r.get(keys.Dedup(r.shard, requestID), &rec)
	if err != nil || !found {
		return nil, false, err
	}
	return rec.GetDigest(), true, nil
}
