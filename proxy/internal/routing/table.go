package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proto/ring"
	"github.com/sundialmq/sundial/proto/validate"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// ShardID names an event shard.
type ShardID = uint64

// Table is an immutable snapshot of a routing table with the lookups the
// proxy needs. The zero of every lookup is safe on a nil *Table.
type Table struct {
	raw        *sundialv1.RoutingTable
	ring       *ring.Ring
	nodes      map[uint64]string // node id → gRPC address
	shards     map[ShardID]*sundialv1.Shard
	partitions map[string]uint32   // topic → partition count
	groups     map[string][]string // topic → its groups, sorted (when the route lists them)
	learned    map[string]uint32   // topics the table does not list, from meta (With)
	handovers  map[partitionKey]*sundialv1.Handover
}

// partitionKey names one partition of a base topic.
type partitionKey struct {
	topic     string
	partition uint32
}

// NewTable indexes rt. prev (may be nil) lends its ring when the shard set
// did not change, since building a ring costs a few milliseconds.
func NewTable(rt *sundialv1.RoutingTable, prev *Table) *Table {
	t := &Table{
		raw:        rt,
		nodes:      make(map[uint64]string, len(rt.GetNodes())),
		shards:     make(map[ShardID]*sundialv1.Shard, len(rt.GetShards())),
		partitions: make(map[string]uint32, len(rt.GetTopics())),
	}
	for _, n := range rt.GetNodes() {
		if n.GetState() == sundialv1.NodeState_NODE_STATE_REMOVED || n.GetGrpcAddr() == "" {
			continue
		}
		t.nodes[n.GetNodeId()] = n.GetGrpcAddr()
	}
	ids := make([]uint64, 0, len(rt.GetShards()))
	for _, s := range rt.GetShards() {
		t.shards[s.GetShardId()] = s
		if !s.GetStarting() {
			ids = append(ids, s.GetShardId())
		}
	}
	if hs := rt.GetHandovers(); len(hs) > 0 {
		t.handovers = make(map[partitionKey]*sundialv1.Handover, len(hs))
		for _, h := range hs {
			t.handovers[partitionKey{h.GetTopic(), h.GetPartition()}] = h
		}
	}
	for _, tp := range rt.GetTopics() {
		if tp.GetPartitions() > 0 {
			t.partitions[tp.GetName()] = uint32(tp.GetPartitions())
		}
		if gs := tp.GetGroups(); len(gs) > 0 {
			if t.groups == nil {
				t.groups = make(map[string][]string, len(rt.GetTopics()))
			}
			t.groups[tp.GetName()] = gs
		}
	}
	r := ring.New(ids)
	if prev != nil && prev.ring.Equal(r) {
		r = prev.ring
	}
	t.ring = r
	return t
}

// Raw is the routing table as received. Callers must not modify it.
func (t *Table) Raw() *sundialv1.RoutingTable {
	if t == nil {
		return nil
	}
	return t.raw
}

// Version is the table's routing version, 0 for a nil table.
func (t *Table) Version() uint64 { return t.Raw().GetVersion() }

// Partitions is the partition count of topic: the table's, else the one
// learned from meta (With), else one (an unknown topic is created with one
// partition on its first publish). A dead-letter topic "<t>.dlq" has the
// partitions of "<t>".
func (t *Table) Partitions(topic string) uint32 {
	if t != nil {
		base := validate.DeadLetterBase(topic)
		if n, ok := t.partitions[base]; ok {
			return n
		}
		if n, ok := t.learned[base]; ok {
			return n
		}
	}
	return 1
}

// Lists reports whether the routing table itself lists topic (or, for a
// dead-letter topic, its base).
func (t *Table) Lists(topic string) bool {
	if t == nil {
		return false
	}
	_, ok := t.partitions[validate.DeadLetterBase(topic)]
	return ok
}

// HasGroup reports whether topic's route lists group (has), and whether
// the table knows topic's groups at all (known: brokers older than the
// groups field send none).
func (t *Table) HasGroup(topic, group string) (has, known bool) {
	if t == nil {
		return false, false
	}
	gs, known := t.groups[validate.DeadLetterBase(topic)]
	if !known {
		return false, false
	}
	_, has = slices.BinarySearch(gs, group)
	return has, true
}

// With is t with the partition counts of topics it does not list yet,
// learned from meta, laid under its own. t is not changed.
func (t *Table) With(learned map[string]uint32) *Table {
	if t == nil || len(learned) == 0 {
		return t
	}
	c := *t
	c.learned = learned
	return &c
}

// Locate is the shard owning partition of topic, 0 if the table has no
// shards. Partition p of a dead-letter topic "<t>.dlq" lives with
// partition p of "<t>": brokers move dead letters within a shard.
func (t *Table) Locate(topic string, partition uint32) ShardID {
	if t == nil {
		return 0
	}
	return t.ring.Locate(validate.DeadLetterBase(topic), partition)
}

// Home is the home shard of a client request id: a ring position that
// depends on the id alone, where the proxy claims the id with the digest of
// its request before applying its parts, so a reuse of the id with other
// messages is refused whatever shards they go to. 0 if the table has no
// shards.
func (t *Table) Home(requestID string) ShardID {
	if t == nil {
		return 0
	}
	return t.ring.Locate("\x00request-id\x00"+requestID, 0)
}

// LocateKey is the shard holding the keys of partition of topic: the
// shard it hands over from while its hand-over is not sealed (a key lives
// in one shard), else Locate's. Keyed publishes, and cancel, reschedule
// and get by key, go there.
func (t *Table) LocateKey(topic string, partition uint32) ShardID {
	if h := t.Handover(topic, partition); h != nil && h.GetSealedAtUnixMs() == 0 {
		return h.GetFromShard()
	}
	return t.Locate(topic, partition)
}

// Settling reports whether a hand-over is open and not sealed: within the
// dedup window after the ring changed (a hand-over seals only after it).
func (t *Table) Settling() bool {
	if t == nil {
		return false
	}
	for _, h := range t.handovers {
		if h.GetSealedAtUnixMs() == 0 {
			return true
		}
	}
	return false
}

// Prior is t as routed before its open hand-overs: every partition whose
// hand-over is not sealed is located on the shard it comes from. A publish with a
// request id is split by it while t is Settling, so a retry of a request
// first sent before the ring changed reaches the shards that stored it
// and is answered from their dedup records (a shard that holds no record
// refuses the moved messages, which are then routed by t).
func (t *Table) Prior() Prior { return Prior{t} }

// Prior locates partitions as before the open hand-overs (Table.Prior).
type Prior struct{ t *Table }

// Partitions is the table's partition count of topic.
func (p Prior) Partitions(topic string) uint32 { return p.t.Partitions(topic) }

// Locate is the shard partition of topic lived on before its hand-over,
// if that is not sealed yet.
func (p Prior) Locate(topic string, partition uint32) ShardID {
	if h := p.t.Handover(topic, partition); h != nil && h.GetSealedAtUnixMs() == 0 {
		return h.GetFromShard()
	}
	return p.t.Locate(topic, partition)
}

// LocateKey is the table's: keys stay on the old shard until the seal.
func (p Prior) LocateKey(topic string, partition uint32) ShardID {
	return p.t.LocateKey(topic, partition)
}

// Handover is the open hand-over of partition of topic (of its base, for a
// dead-letter topic), nil if none.
func (t *Table) Handover(topic string, partition uint32) *sundialv1.Handover {
	if t == nil || t.handovers == nil {
		return nil
	}
	return t.handovers[partitionKey{validate.DeadLetterBase(topic), partition}]
}

// ErrBadMessageID is wrapped by LocateMessage's error for a selector whose
// message id does not parse.
var ErrBadMessageID = errors.New("routing: malformed message id")

// LocateMessage is where the message a selector names lives: for a key,
// the shard of the key's partition (KeyPartition, as publish picks it);
// for a message id, the shard inside the id and partition 0. A key whose
// partition hands over is on LocateKey's shard.
func (t *Table) LocateMessage(sel *sundialv1.MessageSelector) (ShardID, uint32, error) {
	if id := sel.GetMessageId(); id != "" {
		mid, err := receipt.ParseMessageID(id)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %w", ErrBadMessageID, err)
		}
		return mid.Shard(), 0, nil
	}
	p := KeyPartition(sel.GetKey(), t.Partitions(sel.GetTopic()))
	return t.LocateKey(sel.GetTopic(), p), p, nil
}

// KeyPartition is the partition of a keyed message (ring.KeyPartition,
// which brokers check too). Publish, cancel, reschedule and get all use it.
func KeyPartition(key string, partitions uint32) uint32 {
	return ring.KeyPartition(key, partitions)
}

// Fingerprint identifies where topic's partitions live: equal fingerprints
// mean the same shard holds each partition. Page tokens carry it to notice
// a placement change between pages.
func (t *Table) Fingerprint(topic string) uint64 {
	byShard := t.TopicShards(topic)
	ids := make([]ShardID, 0, len(byShard))
	for id := range byShard {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var buf []byte
	for _, id := range ids {
		buf = binary.BigEndian.AppendUint64(buf, id)
		for _, p := range byShard[id] {
			buf = binary.BigEndian.AppendUint32(buf, p)
		}
		buf = append(buf, 0xff)
	}
	return xxhash.Sum64(buf)
}

// ShardCount is the number of event shards on the ring (starting shards
// are not).
func (t *Table) ShardCount() int {
	if t == nil {
		return 0
	}
	return t.ring.Len()
}

// TopicShards maps each shard holding a partition of topic to those
// partitions, in ascending partition order. A partition that hands over
// is held by both shards until its hand-over closes: the old one keeps
// delivering what it holds.
func (t *Table) TopicShards(topic string) map[ShardID][]uint32 {
	out := make(map[ShardID][]uint32)
	if t.ShardCount() == 0 {
		return out
	}
	n := t.Partitions(topic)
	for p := range n {
		s := t.Locate(topic, p)
		out[s] = append(out[s], p)
		if h := t.Handover(topic, p); h != nil && h.GetFromShard() != s {
			out[h.GetFromShard()] = append(out[h.GetFromShard()], p)
		}
	}
	return out
}

// LeaderHint is the node id the table names as the shard's leader, 0 when
// unknown.
func (t *Table) LeaderHint(shard ShardID) uint64 {
	if t == nil {
		return 0
	}
	return t.shards[shard].GetLeaderNodeId()
}

// ReplicaAddrs lists the gRPC addresses of the shard's replicas, the
// hinted leader first and the rest in replica order. Replicas on nodes
// without an address are left out.
func (t *Table) ReplicaAddrs(shard ShardID) []string {
	if t == nil {
		return nil
	}
	s, ok := t.shards[shard]
	if !ok {
		return nil
	}
	out := make([]string, 0, len(s.GetReplicas()))
	if a, ok := t.nodes[s.GetLeaderNodeId()]; ok && s.GetLeaderNodeId() != 0 {
		out = append(out, a)
	}
	for _, r := range s.GetReplicas() {
		if r.GetNodeId() == s.GetLeaderNodeId() {
			continue
		}
		if a, ok := t.nodes[r.GetNodeId()]; ok {
			out = append(out, a)
		}
	}
	return out
}

// NodeAddr is the gRPC address of node id, "" when unknown.
func (t *Table) NodeAddr(id uint64) string {
	if t == nil {
		return ""
	}
	return t.nodes[id]
}

// NodeAddrs lists the gRPC addresses of all live nodes in table order.
func (t *Table) NodeAddrs() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, len(t.nodes))
	for _, n := range t.raw.GetNodes() {
		if a, ok := t.nodes[n.GetNodeId()]; ok {
			out = append(out, a)
		}
	}
	return out
}
