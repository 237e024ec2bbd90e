package query

import (
	"encoding/binary"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// GroupStats are one group's counts of a topic on the shard.
type GroupStats struct {
	Group string
	// Ready copies are due (a lease that ran out counts), InFlight ones
	// are leased and not yet due again, Scheduled ones are not due yet.
	Ready, InFlight, Scheduled int64
	DeadLettered               int64
	// OldestReadyAgeMs is how long the oldest ready copy has been due; 0
	// if none is.
	OldestReadyAgeMs int64
}

// Stats answers the counts of every group of topic registered on the
// shard, in group order, over partitions (none means partition 0).
func (r *Reader) Stats(topic string, partitions []uint32) ([]GroupStats, error) {
	groups, err := r.Groups(topic)
	if err != nil {
		return nil, err
	}
	out := make([]GroupStats, 0, len(groups))
	for _, g := range groups {
		var c fsmpb.Counters
		if _, err := r.get(keys.Counter(r.shard, topic, g), &c); err != nil {
			return nil, err
		}
		st := GroupStats{Group: g, InFlight: c.InFlight, DeadLettered: c.DeadLettered}
		oldest := int64(0)
		examined := 0
		for _, part := range partitionsOf(partitions) {
			q := keys.Queue{Topic: topic, Partition: part, Group: g}
			err := r.each(keys.QueuePrefix(r.shard, q), keys.DueUntil(r.shard, q, r.nowMs), func(k, v []byte) (bool, error) {
				if examined++; examined > MaxStatsExamined {
					return false, nil
				}
				e, err := keys.ParseDue(r.shard, q, k)
				if err != nil {
					return false, err
				}
				if _, leased, _ := keys.ParseDueValue(v); leased {
					st.InFlight-- // its lease ran out: ready for redelivery
				}
				st.Ready++
				if oldest == 0 || e.VisibleAtMs < oldest {
					oldest = e.VisibleAtMs
				}
				return true, nil
			})
			if err != nil {
				return nil, err
			}
		}
		if oldest > 0 {
			st.OldestReadyAgeMs = r.nowMs - oldest
		}
		st.Scheduled = max(c.Pending-st.InFlight-st.Ready, 0)
		out = append(out, st)
	}
	return out, nil
}

// HistogramArgs selects the scheduled copies of one group to count.
type HistogramArgs struct {
	Topic, Group string
	// Partitions of the topic the shard holds; none means partition 0.
	Partitions []uint32
	// FromMs and ToMs bound the copies' due times to [FromMs, ToMs);
	// FromMs is a multiple of BucketMs.
	FromMs, ToMs int64
	// BucketMs is the width of a bucket; it must be positive.
	BucketMs int64
}

// Bucket counts the copies due in [StartMs, StartMs+width).
type Bucket struct {
	StartMs int64
	Count   int64
}

// DueHistogram counts the group's scheduled copies (not in flight) per
// bucket and answers the non-empty buckets in time order.
func (r *Reader) DueHistogram(a HistogramArgs) ([]Bucket, error) {
	counts := map[int64]int64{}
	examined := 0
	for _, part := range partitionsOf(a.Partitions) {
		q := keys.Queue{Topic: a.Topic, Partition: part, Group: a.Group}
		prefixLen := len(keys.QueuePrefix(r.shard, q))
		err := r.each(keys.DueFrom(r.shard, q, a.FromMs), keys.DueFrom(r.shard, q, a.ToMs), func(k, v []byte) (bool, error) {
			if examined++; examined > MaxHistExamined {
				return false, nil
			}
			if _, leased, _ := keys.ParseDueValue(v); leased {
				return true, nil
			}
			at := int64(binary.BigEndian.Uint64(k[prefixLen:]))
			counts[at-at%a.BucketMs]++
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	var out []Bucket
	for start := a.FromMs; start < a.ToMs; start += a.BucketMs {
		if n := counts[start]; n > 0 {
			out = append(out, Bucket{StartMs: start, Count: n})
		}
	}
	return out, nil
}
