package fanout

import (
	"slices"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// MergeStats merges per-shard group stats into one entry per group,
// ordered by the groups in order first, then any other group by name.
// Counts (scheduled, ready, in flight, dead-lettered) are summed, since
// every copy lives on exactly one shard. oldest_ready_age_ms is the
// maximum, which is exact. Lateness percentiles cannot be merged from
// percentiles: the maximum over shards is used, an upper bound of the
// topic-wide percentile (exact with one shard).
func MergeStats(order []string, perShard ...[]*sundialv1.GroupStats) []*sundialv1.GroupStats {
	byGroup := make(map[string]*sundialv1.GroupStats)
	get := func(g string) *sundialv1.GroupStats {
		s, ok := byGroup[g]
		if !ok {
			s = &sundialv1.GroupStats{Group: g}
			byGroup[g] = s
		}
		return s
	}
	for _, g := range order {
		get(g)
	}
	for _, stats := range perShard {
		for _, in := range stats {
			s := get(in.GetGroup())
			s.Scheduled += in.GetScheduled()
			s.Ready += in.GetReady()
			s.InFlight += in.GetInFlight()
			s.DeadLettered += in.GetDeadLettered()
			s.OldestReadyAgeMs = max(s.OldestReadyAgeMs, in.GetOldestReadyAgeMs())
			s.LatenessP50Ms = max(s.LatenessP50Ms, in.GetLatenessP50Ms())
			s.LatenessP99Ms = max(s.LatenessP99Ms, in.GetLatenessP99Ms())
		}
	}
	out := make([]*sundialv1.GroupStats, 0, len(byGroup))
	seen := make(map[string]bool, len(order))
	for _, g := range order {
		if !seen[g] {
			seen[g] = true
			out = append(out, byGroup[g])
		}
	}
	var rest []string
	for g := range byGroup {
		if !seen[g] {
			rest = append(rest, g)
		}
	}
	slices.Sort(rest)
	for _, g := range rest {
		out = append(out, byGroup[g])
	}
	return out
}

// MergeHistogram sums the shards' counts per bucket start, in ascending
// order of start; buckets with a zero count are left out.
func MergeHistogram(perShard ...[]*sundialv1.HistogramCount) []*sundialv1.HistogramCount {
	sums := make(map[int64]int64)
	for _, counts := range perShard {
		for _, c := range counts {
			sums[c.GetStartUnixMs()] += c.GetCount()
		}
	}
	starts := make([]int64, 0, len(sums))
	for s, n := range sums {
		if n != 0 {
			starts = append(starts, s)
		}
	}
	slices.Sort(starts)
	out := make([]*sundialv1.HistogramCount, 0, len(starts))
	for _, s := range starts {
		out = append(out, &sundialv1.HistogramCount{StartUnixMs: s, Count: sums[s]})
	}
	return out
}
