// Package batch splits a publish batch into one part per event shard and
// merges the parts' answers back into request order.
//
// Split and Merge are pure given the partitioner's state; the Partitioner
// (round-robin per topic for messages without a key) is safe for
// concurrent use, its mutex guarding the per-topic counters.
package batch

import (
	"slices"
	"sync"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Locator answers where a topic's partitions live.
type Locator interface {
	Partitions(topic string) uint32
	Locate(topic string, partition uint32) uint64
}

// maxTopics bounds the round-robin counters kept; past it they restart.
const maxTopics = 1 << 16

// Partitioner picks the partition of a message.
type Partitioner struct {
	mu   sync.Mutex // guards next
	next map[string]uint32
}

// NewPartitioner returns a partitioner with every topic's round robin at 0.
func NewPartitioner() *Partitioner {
	return &Partitioner{next: make(map[string]uint32)}
}

// Partition is xxhash(key) mod partitions for a keyed message, so every
// publish of a key lands on the same partition; else the topic's next
// partition in round-robin order.
func (p *Partitioner) Partition(topic, key string, partitions uint32) uint32 {
	if partitions <= 1 {
		return 0
	}
	if key != "" {
		return routing.KeyPartition(key, partitions)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.next) >= maxTopics {
		clear(p.next)
	}
	n := p.next[topic]
	p.next[topic] = n + 1
	return n % partitions
}

// Part is the slice of a batch bound for one shard.
type Part struct {
	Shard uint64
	// Indices[j] is the request position of Messages[j].
	Indices  []int
	Messages []*brokerv1.PartitionedMessage
}

// Split groups msgs by the shard of their partition, in ascending shard
// order, each part keeping request order.
func Split(msgs []*sundialv1.Message, loc Locator, p *Partitioner) []Part {
	byShard := make(map[uint64]*Part)
	var order []uint64
	for i, m := range msgs {
		part := p.Partition(m.GetTopic(), m.GetKey(), loc.Partitions(m.GetTopic()))
		shard := loc.Locate(m.GetTopic(), part)
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
// length, or a missing result, gives codes.Internal. answers[i] answers
// parts[i]; n is the batch size.
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
