package query

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// ListArgs selects one page of a topic's messages on the shard.
type ListArgs struct {
	Topic string
	// Group whose due index orders a listing without a key prefix; the
	// caller resolves an empty group to its default.
	Group string
	// Partitions of the topic the shard holds; none means partition 0.
	Partitions []uint32
	Filter
	// After is the cursor of the last message of the previous page; nil
	// starts at the beginning.
	After []byte
	// PageSize is the most messages answered; it must be positive.
	PageSize int
}

// Listed is one message of a page and its cursor.
type Listed struct {
	Message *Message
	// Cursor sorts the same on every shard: "k" + key for a listing by
	// key prefix, else the due-index suffix (visible_at, priority, id) of
	// the group's scheduled copy.
	Cursor []byte
}

// List answers up to a.PageSize messages matching a after a.After. With a
// key prefix it walks the topic's key records (pending messages only);
// otherwise it walks the group's due index from a.FromMs to a.ToMs in
// each partition, skipping copies in flight, and merges the partitions by
// cursor.
func (r *Reader) List(a ListArgs) ([]Listed, error) {
	if a.KeyPrefix != "" {
		return r.listByKey(a)
	}
	return r.listByDue(a)
}

func (r *Reader) listByKey(a ListArgs) ([]Listed, error) {
	var page []Listed
	prefix := keys.KeyPrefix(r.shard, a.Topic, a.KeyPrefix)
	lower := prefix
	if len(a.After) > 1 {
		lower = append(keys.Key(r.shard, a.Topic, string(a.After[1:])), 0)
	}
	examined := 0
	err := r.each(lower, keys.PrefixEnd(prefix), func(k, v []byte) (bool, error) {
		if examined++; examined > MaxListExamined {
			return false, nil
		}
		var rec fsmpb.KeyRecord
		if err := proto.Unmarshal(v, &rec); err != nil || rec.End != fsmpb.EndState_END_STATE_PENDING {
			return err == nil, err
		}
		m, err := r.Message(rec.MessageId)
		if err != nil || m == nil || !a.matches(m) || !a.dueInRange(m.DueAtMs) {
			return err == nil, err
		}
		page = append(page, Listed{Message: m, Cursor: append([]byte("k"), keys.KeyOfRecord(r.shard, a.Topic, k)...)})
		return len(page) < a.PageSize, nil
	})
	return page, err
}

func (r *Reader) listByDue(a ListArgs) ([]Listed, error) {
	// Each partition yields up to a page of matching messages; the merge
	// keeps the first page.
	var all []Listed
	examined := 0
	for _, part := range partitionsOf(a.Partitions) {
		q := keys.Queue{Topic: a.Topic, Partition: part, Group: a.Group}
		prefix := keys.QueuePrefix(r.shard, q)
		lower := keys.DueFrom(r.shard, q, a.FromMs)
		if len(a.After) > 0 {
			if k := append(slices.Clone(prefix), a.After...); bytes.Compare(k, lower) >= 0 {
				lower = append(k, 0)
			}
		}
		upper := keys.PrefixEnd(prefix)
		if a.ToMs > 0 {
			upper = keys.DueFrom(r.shard, q, a.ToMs)
		}
		n := 0
		err := r.each(lower, upper, func(k, v []byte) (bool, error) {
			if examined++; examined > MaxListExamined || n >= a.PageSize {
				return false, nil
			}
			if _, leased, _ := keys.ParseDueValue(v); leased {
				return true, nil // in flight: not scheduled
			}
			e, err := keys.ParseDue(r.shard, q, k)
			if err != nil {
				return false, err
			}
			m, err := r.Message(e.ID)
			if err != nil || m == nil || !a.matches(m) {
				return err == nil, err
			}
			all = append(all, Listed{Message: m, Cursor: slices.Clone(k[len(prefix):])})
			n++
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(all, func(x, y Listed) int { return bytes.Compare(x.Cursor, y.Cursor) })
	return all[:min(len(all), a.PageSize)], nil
}

func partitionsOf(parts []uint32) []uint32 {
	if len(parts) == 0 {
		return []uint32{0}
	}
	return parts
}
