// Package batch splits a publish batch into one part per event shard and
// merges the parts' answers back into request order.
//
// Split and Merge are pure functions: the partition of every message
// depends only on the request id, the message's place in the request and
// the routing table, never on call order or a counter. A retried request
// (same id, same messages) therefore reaches the same shards in the same
// parts on every proxy, which is what lets each broker deduplicate its
// part by request id. Nothing here holds state or starts goroutines.
package batch

import (
	"slices"

	"github.com/cespare/xxhash/v2"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Locator answers where a topic's partitions live: Locate for unkeyed
// messages, LocateKey for keyed ones (they differ while a partition hands
// over to a new shard).
type Locator interface {
	Partitions(topic string) uint32
	Locate(topic string, partition uint32) uint64
	LocateKey(topic string, partition uint32) uint64
}

// Partition is the partition of a message. A keyed message goes to
// xxhash(key) mod partitions, so every publish of a key lands on the same
// partition. An unkeyed message is the ordinal-th unkeyed message of its
// topic in request requestID; those are spread round robin from a start
// that hashes (requestID, topic), so one request covers the partitions
// evenly and different requests start at different partitions.
func Partition(requestID, topic, key string, ordinal int, partitions uint32) uint32 {
	if partitions <= 1 {
		return 0
	}
	if key != "" {
		return routing.KeyPartition(key, partitions)
	}
	h := xxhash.New()
	_, _ = h.WriteString(requestID)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(topic)
	start := h.Sum64() % uint64(partitions)
	return uint32((start + uint64(ordinal)) % uint64(partitions))
}

// Part is the slice of a batch bound for one shard.
type Part struct {
	Shard uint64
	// Indices[j] is the request position of Messages[j].
	Indices  []int
	Messages []*brokerv1.PartitionedMessage
}

// Split groups the messages of request requestID by the shard of their
// partition (see Partition), in ascending shard order, each part keeping
// request order. The same arguments give the same parts.
func Split(requestID string, msgs []*sundialv1.Message, loc Locator) []Part {
	byShard := make(map[uint64]*Part)
	var order []uint64
	unkeyed := make(map[string]int) // topic → unkeyed messages seen so far
	for i, m := range msgs {
		ordinal := 0
		if m.GetKey() == "" {
			ordinal = unkeyed[m.GetTopic()]
			unkeyed[m.GetTopic()] = ordinal + 1
		}
		part := Partition(requestID, m.GetTopic(), m.GetKey(), ordinal, loc.Partitions(m.GetTopic()))
		shard := loc.Locate(m.GetTopic(), part)
		if m.GetKey() != "" {
			shard = loc.LocateKey(m.GetTopic(), part)
		}
		pt, ok := byShard[shard]
		if !ok {
			pt = &Part{Shard: shard}
			byShard[shard] = pt
			order = append(order, shard)
		}
		pt.Indices = append(pt.Indices, i)
		pt.Messages = append(pt.Messages, &brokerv1.PartitionedMessage{Message: m, Partition: part})
	}
	slices.Sort(order)
	out := make([]Part, 0, len(order))
	for _, s := range order {
		out = append(out, *byShard[s])
	}
	return out
}

// Answer is a shard's reply to one part: its results in part order, or
// the error that failed the whole part.
type Answer struct {
	Results []*sundialv1.PublishResult
	Err     *statuspb.Status
}

// Merge places each part's results at their request positions. A failed
// part gives each of its messages the part's error; a reply of the wrong
// length, or a missing result, gives codes.Internal. A retry cannot cause
// that: Split sends it the same parts, and a broker answers a dedup hit
// whose messages differ in digest or count with InvalidArgument, so
// Internal here means a broker bug. answers[i] answers parts[i]; n is the
// batch size.
func Merge(n int, parts []Part, answers []Answer) []*sundialv1.PublishResult {
	out := make([]*sundialv1.PublishResult, n)
	for i, pt := range parts {
		a := answers[i]
		if a.Err == nil && len(a.Results) != len(pt.Indices) {
			a.Err = &statuspb.Status{Code: int32(codes.Internal), Message: "shard answered a different number of results than messages sent"}
		}
		for j, idx := range pt.Indices {
			if a.Err != nil {
				out[idx] = &sundialv1.PublishResult{Error: a.Err}
			} else {
				out[idx] = a.Results[j]
			}
		}
	}
	for i, r := range out {
		if r == nil {
			out[i] = &sundialv1.PublishResult{Error: &statuspb.Status{Code: int32(codes.Internal), Message: "no result for message"}}
		}
	}
	return out
}
