package fsm

import (
	"encoding/binary"
	"errors"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/proto/ring"
	"github.com/sundialmq/sundial/proto/validate"
)

// fenceScanLimit bounds the key records a fence examines; one that runs
// out counts as holding keys (the hand-over check tries again later), so
// the work of one apply stays bounded and the answer deterministic.
const fenceScanLimit = 100_000

// fence sets or lifts the hand-over fence of f's partition (see
// fsmpb.Fence). A fence is set only if the shard holds no key record of
// the partition, of the topic or its dead-letter topic: the publishes
// applied before it are all the keys the partition will ever hold here.
func (a *applier) fence(f *fsmpb.Fence) (*fsmpb.Outcome, error) {
	delete(a.fencedOf, f.Topic)
	k := keys.Fence(a.shard, f.Topic, f.Partition)
	if f.Lift {
		return &fsmpb.Outcome{}, a.del(k)
	}
	for _, topic := range []string{f.Topic, f.Topic + DLQSuffix} {
		held, err := a.holdsKeys(topic, f.Partition, max(f.Partitions, 1))
		if err != nil || held {
			return &fsmpb.Outcome{KeysHeld: held}, err
		}
	}
	return &fsmpb.Outcome{}, a.set(k, nil)
}

// holdsKeys reports whether the shard has a key record (pending or
// remembered) on partition of topic, examining at most fenceScanLimit.
func (a *applier) holdsKeys(topic string, partition, partitions uint32) (bool, error) {
	prefix := keys.KeyPrefix(a.shard, topic, "")
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return false, err
	}
	held := false
	for valid, n := it.First(), 0; valid; valid, n = it.Next(), n+1 {
		a.visited++
		if n == fenceScanLimit || ring.KeyPartition(keys.KeyOfRecord(a.shard, topic, it.Key()), partitions) == partition {
			held = true
			break
		}
	}
	return held, errors.Join(it.Error(), it.Close())
}

// fenced is the first keyed message of msgs whose partition is fenced, or
// nil.
func (a *applier) fenced(msgs []*fsmpb.StoredMessage) (*fsmpb.FencedPartition, error) {
	for _, m := range msgs {
		if m.Key == "" {
			continue
		}
		base := validate.DeadLetterBase(m.Topic)
		parts, err := a.fences(base)
		if err != nil {
			return nil, err
		}
		if parts[m.Partition] {
			return &fsmpb.FencedPartition{Topic: base, Partition: m.Partition}, nil
		}
	}
	return nil, nil
}

// fences are the fenced partitions of topic (a base topic name), read once
// per run of entries.
func (a *applier) fences(topic string) (map[uint32]bool, error) {
	if parts, ok := a.fencedOf[topic]; ok {
		return parts, nil
	}
	prefix := keys.FencePrefix(a.shard, topic)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var parts map[uint32]bool
	for valid := it.First(); valid; valid = it.Next() {
		if k := it.Key(); len(k) == len(prefix)+4 {
			if parts == nil {
				parts = map[uint32]bool{}
			}
			parts[binary.BigEndian.Uint32(k[len(prefix):])] = true
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, err
	}
	if a.fencedOf == nil {
		a.fencedOf = map[string]map[uint32]bool{}
	}
	a.fencedOf[topic] = parts
	return parts, nil
}
