package scenario

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ms(5, 1, 3), 0.5, 3 * time.Millisecond},
		{"median of even is lower", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{"p99 of 100", ms(rangeInts(1, 100)...), 0.99, 99 * time.Millisecond},
		{"p100 is max", ms(rangeInts(1, 100)...), 1, 100 * time.Millisecond},
		{"p0 is min", ms(9, 4, 6), 0, 4 * time.Millisecond},
		{"negative values", ms(-3, 2, -1), 0.5, -1 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(slices.Clone(tc.samples), tc.q); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.samples, tc.q, got, tc.want)
			}
		})
	}
}

func rangeInts(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestBucketRoundTrip(t *testing.T) {
	for _, us := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 12345, 1 << 20, 1<<40 + 12345} {
		b := bucketOf(us)
		up := bucketUpper(b)
		if up < us {
			t.Errorf("bucketUpper(bucketOf(%d)) = %d, want >= %d", us, up, us)
		}
		if float64(up-us) > float64(us)/subCount+1 {
			t.Errorf("bucketUpper(bucketOf(%d)) = %d, want within %.1f%%", us, up, 100.0/subCount)
		}
		if b > 0 && bucketUpper(b-1) >= us {
			t.Errorf("bucketUpper(%d) = %d, want < %d (buckets must not overlap)", b-1, bucketUpper(b-1), us)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		gen  func(i int) time.Duration
		n    int
	}{
		{"uniform 0-100ms", func(int) time.Duration { return time.Duration(rng.Int64N(int64(100 * time.Millisecond))) }, 10000},
		{"exponential", func(int) time.Duration { return time.Duration(rng.ExpFloat64() * float64(2*time.Millisecond)) }, 10000},
		{"constant", func(int) time.Duration { return 1500 * time.Microsecond }, 100},
		{"tiny", func(i int) time.Duration { return time.Duration(i%50) * time.Microsecond }, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			exact := make([]time.Duration, tc.n)
			for i := range exact {
				exact[i] = tc.gen(i)
				h.Record(exact[i])
			}
			for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
				want := Percentile(exact, q).Truncate(time.Microsecond)
				got := h.Quantile(q)
				tol := time.Duration(float64(want)/subCount) + 2*time.Microsecond
				if got < want-tol || got > want+tol {
					t.Errorf("Quantile(%v) = %v, want %v ± %v", q, got, want, tol)
				}
			}
			if h.Count() != uint64(tc.n) {
				t.Errorf("Count() = %d, want %d", h.Count(), tc.n)
			}
		})
	}
}

func TestHistogramMerge(t *testing.T) {
	var a, b, all Histogram
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * 10 * time.Microsecond
		all.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	if got, want := m.Summary(), all.Summary(); got != want {
		t.Errorf("Merge(a, b).Summary() = %+v, want %+v", got, want)
	}
	var empty Histogram
	if got := empty.Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile(0.5) = %v, want 0", got)
	}
}
