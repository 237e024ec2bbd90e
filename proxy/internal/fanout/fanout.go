// Package fanout holds the pure halves of the proxy's topic-wide calls:
// how a budget (Receive's max_messages, a redrive's max) is split over the
// shards of a topic, and how the shards' answers are merged back into one
// (group stats, due histograms, message listings and their page tokens).
//
// Everything here is a pure function of its arguments; the proxy package
// does the calls. Nothing is shared between goroutines.
package fanout

import "slices"

// Split divides total over shards so the shares sum to exactly total:
// every shard gets total/len(shards), and the remainder goes one each to
// the shards starting at index offset (mod len), so rotating offset
// serves every shard over time. Shards with a zero share are left out.
// The result lists shards in the order given.
func Split(total int64, shards []uint64, offset int) []Share {
	n := int64(len(shards))
	if n == 0 || total <= 0 {
		return nil
	}
	base, rem := total/n, total%n
	start := ((offset % int(n)) + int(n)) % int(n)
	out := make([]Share, 0, len(shards))
	for i, s := range shards {
		q := base
		// Is i among the rem indices following start (cyclically)?
		if int64((i-start+int(n))%int(n)) < rem {
			q++
		}
		if q > 0 {
			out = append(out, Share{Shard: s, N: q})
		}
	}
	return out
}

// Share is one shard's part of a split budget.
type Share struct {
	Shard uint64
	N     int64
}

// SortedShards returns the keys of a shard map in ascending order.
func SortedShards[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
