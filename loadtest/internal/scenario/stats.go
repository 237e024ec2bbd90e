// Package scenario holds loadtest's scenarios. Each is a function taking a
// context, a System (package target implements it for Sundial and each
// peer; a scenario that needs more, such as Failover or Backup, asks for it
// with an interface of its own) and its config, so a test can drive it as
// well as the CLI. Scenarios own the goroutines they start and join them
// before returning.
//
// It also holds the latency statistics: Histogram, a fixed-memory log-linear
// histogram for hot paths, and Percentile over exact samples.
package scenario

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// subBits sets the histogram's precision: each power-of-two range is split
// into 2^subBits linear buckets, so a reported value is within 1/2^subBits
// (about 1.6%) of the true one.
const subBits = 6

const subCount = 1 << subBits

// Histogram counts durations in log-linear buckets of microseconds (values
// below 2^subBits µs are exact). The zero value is ready to use. It is not
// safe for concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts   []uint64
	n        uint64
	sum      time.Duration
	min, max time.Duration
}

func bucketOf(us uint64) int {
	if us < subCount {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1))
	shift := e - subBits
	return (shift+1)*subCount + int(us>>shift) - subCount
}

// bucketUpper is the largest value in bucket i, in microseconds.
func bucketUpper(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	sub := uint64(i%subCount + subCount)
	return (sub+1)<<shift - 1
}

// Record adds one duration; negatives count as 0.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	b := bucketOf(uint64(d / time.Microsecond))
	if b >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, b+1-len(h.counts))...)
	}
	h.counts[b]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value (exact).
func (h *Histogram) Max() time.Duration { return h.max }

// Min is the smallest recorded value (exact).
func (h *Histogram) Min() time.Duration { return h.min }

// Mean is the average of the recorded values (exact).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the upper bound of the
// bucket holding the ceil(q·n)-th value, clamped to [Min, Max]. It is 0 for
// an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := time.Duration(bucketUpper(i)) * time.Microsecond
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// Percentile returns the nearest-rank q-quantile (q in [0, 1]) of samples,
// which it sorts in place. It is 0 for no samples.
func Percentile(samples []time.Duration, q float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	if !slices.IsSorted(samples) {
		slices.Sort(samples)
	}
	rank := int(math.Ceil(q * float64(len(samples))))
	rank = min(max(rank, 1), len(samples))
	return samples[rank-1]
}

// Latency summarizes a distribution for reports.
type Latency struct {
	Count uint64        `json:"count"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
	Mean  time.Duration `json:"mean_ns"`
}

// Summary summarizes h.
func (h *Histogram) Summary() Latency {
	return Latency{Count: h.n, P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), Max: h.max, Mean: h.Mean()}
}

// Quantile is one point of a distribution: the value at quantile Q.
type Quantile struct {
	Q     float64       `json:"q"`
	Value time.Duration `json:"value_ns"`
}

// CDFQuantiles are the quantiles reports chart.
var CDFQuantiles = []float64{0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 1}

// CDF returns h's value at each of qs.
func (h *Histogram) CDF(qs []float64) []Quantile {
	if h.n == 0 {
		return nil
	}
	out := make([]Quantile, len(qs))
	for i, q := range qs {
		out[i] = Quantile{Q: q, Value: h.Quantile(q)}
	}
	return out
}
