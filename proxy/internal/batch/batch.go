// Package batch splits a publish batch into one part per event shard and
// merges the parts' answers back into request order.
//
// Split and Merge are pure functions: the partition of every message
// depends only on the request id, the request's messages, the message's
// place among them and the routing table, never on call order or a
// counter. A retried request (same id, same messages) therefore reaches
// the same shards in the same parts on every proxy, which is what lets
// each broker deduplicate its part by request id. Nothing here holds
// state or starts goroutines.
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

// MinPartMessages is the fewest unkeyed messages of one topic a request
// sends to each partition it uses: a request of n unkeyed messages of a
// topic goes to min(partitions, max(1, n/MinPartMessages)) partitions. Each
// part is a Raft entry on its shard and the request waits for the slowest,
// so cutting a 100-message batch into one part per partition (12 messages
// each on 8 shards) cost a third more server CPU per message and the
// latency of the slowest of 8 commits (docs/performance.md); requests
// spread over the partitions instead, by their start.
const MinPartMessages = 100

// Partition is the partition of a message. A keyed message goes to
// xxhash(key) mod partitions, so every publish of a key lands on the same
// partition. An unkeyed message is the ordinal-th of the unkeyed messages
// of its topic in a request holding unkeyed of them: those are cut into
// runs of at least MinPartMessages (one run when there are fewer), in
// order, and run r goes to partition (start + r) mod partitions, where
// start hashes (requestID, topic), so different requests start at
// different partitions and a retry lands where the first try did (the
// proxy splits a request without an id by a random one).
func Partition(requestID, topic, key string, ordinal, unkeyed int, partitions uint32) uint32 {
	if partitions <= 1 {
		return 0
	}
	if key != "" {
		return routing.KeyPartition(key, partitions)
	}
	return run(runHash(requestID, topic)%uint64(partitions), ordinal, unkeyed, partitions)
}

// runHash hashes (requestID, topic): where a request's runs of the topic
// start.
func runHash(requestID, topic string) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(requestID)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(topic)
	return h.Sum64()
}

// run is the partition of the ordinal-th of unkeyed messages whose runs
// start at partition start.
func run(start uint64, ordinal, unkeyed int, partitions uint32) uint32 {
	runs := min(uint64(partitions), max(1, uint64(unkeyed)/MinPartMessages))
	run := uint64(0)
	if unkeyed > 0 && ordinal >= 0 {
		run = uint64(ordinal) * runs / uint64(unkeyed)
	}
	return uint32((start + run) % uint64(partitions))
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
// request order. The same arguments give the same parts, and a message's
// partition depends on the request and the topic's partition count only,
// never on which shards serve: a retry sent after shards were added (while
// the table is Settling, split by Table.Prior) reaches the partitions, and
// so the shards, that answered the first attempt.
func Split(requestID string, msgs []*sundialv1.Message, loc Locator) []Part {
	byShard := make(map[uint64]*Part)
	var order []uint64
	type topicRuns struct {
		total, seen int
		start       uint64
	}
	unkeyed := make(map[string]*topicRuns) // topic → its unkeyed messages
	for _, m := range msgs {
		if m.GetKey() == "" {
			tr, ok := unkeyed[m.GetTopic()]
			if !ok {
				tr = &topicRuns{start: runHash(requestID, m.GetTopic()) % uint64(max(loc.Partitions(m.GetTopic()), 1))}
				unkeyed[m.GetTopic()] = tr
			}
			tr.total++
		}
	}
	for i, m := range msgs {
		partitions := loc.Partitions(m.GetTopic())
		var part uint32
		if m.GetKey() != "" || partitions <= 1 {
			part = Partition(requestID, m.GetTopic(), m.GetKey(), 0, 0, partitions)
		} else {
			tr := unkeyed[m.GetTopic()]
			part = run(tr.start, tr.seen, tr.total, partitions)
			tr.seen++
		}
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
