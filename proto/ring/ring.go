// Package ring maps topic partitions onto event shards with a consistent
// hash ring (buraksezer/consistent, hasher xxhash), so that every proxy
// and broker given the same shard set computes the same owner for every
// key (proxies route by it, brokers refuse a message it does not map to
// them), and adding a shard moves only about 1/n of the keys.
//
// A Ring is immutable after New and safe for concurrent use: build a new
// one when the shard set changes.
package ring

import (
	"slices"
	"strconv"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// The ring's shape. They are constants, not configuration: every tier must
// compute the same answer for the same shard set.
const (
	PartitionCount    = 1021
	ReplicationFactor = 50
	Load              = 1.25
)

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

type member struct {
	id   uint64
	name string
}

func (m member) String() string { return m.name }

// Ring is a consistent hash ring over event-shard ids.
type Ring struct {
	c      *consistent.Consistent
	shards []uint64 // sorted, distinct
}

// New builds a ring over the given shard ids; order and duplicates do not
// matter.
func New(shards []uint64) *Ring {
	ids := slices.Clone(shards)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	r := &Ring{shards: ids}
	if len(ids) == 0 {
		return r
	}
	members := make([]consistent.Member, len(ids))
	for i, id := range ids {
		members[i] = member{id: id, name: strconv.FormatUint(id, 10)}
	}
	r.c = consistent.New(members, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    PartitionCount,
		ReplicationFactor: ReplicationFactor,
		Load:              Load,
	})
	return r
}

// Shards returns the ring's shard ids in ascending order. The caller must
// not modify the slice.
func (r *Ring) Shards() []uint64 { return r.shards }

// Len is the number of shards on the ring.
func (r *Ring) Len() int { return len(r.shards) }

// Locate returns the shard owning partition of topic, hashing the key
// "topic/partition". It returns 0 on an empty ring.
func (r *Ring) Locate(topic string, partition uint32) uint64 {
	if r.c == nil {
		return 0
	}
	var buf [256]byte
	key := append(buf[:0], topic...)
	key = append(key, '/')
	key = strconv.AppendUint(key, uint64(partition), 10)
	// The same partition id consistent.FindPartitionID computes, hashed here
	// so the key stays on the stack.
	part := int(xxhash.Sum64(key) % PartitionCount)
	m := r.c.GetPartitionOwner(part)
	return m.(member).id
}

// KeyPartition is the partition of a keyed message: xxhash(key) mod
// partitions. Publish, cancel, reschedule and get all use it, in the proxy
// to route and in the broker to refuse a keyed message routed elsewhere.
func KeyPartition(key string, partitions uint32) uint32 {
	if partitions <= 1 {
		return 0
	}
	return uint32(xxhash.Sum64String(key) % uint64(partitions))
}

// Equal reports whether two rings hold the same shard set.
func (r *Ring) Equal(o *Ring) bool {
	return r != nil && o != nil && slices.Equal(r.shards, o.shards)
}
