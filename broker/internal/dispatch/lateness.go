package dispatch

import (
	"math"
	"sync"
)

// lateness owns the first-delivery lateness histograms, one per queue
// (topic and group) that had a first delivery.
//
// Pushes (on the loop and on lease committers) observe, Lateness (gRPC)
// reads, the loop prunes; mu guards byQueue and is taken after the
// dispatcher's mu when both are held.
type lateness struct {
	mu      sync.Mutex
	byQueue map[queueKey]*histogram
}

func newLateness() *lateness { return &lateness{byQueue: map[queueKey]*histogram{}} }

// observe counts a first delivery of k pushed at nowMs, ms after its due
// time.
func (l *lateness) observe(k queueKey, nowMs, ms int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.byQueue[k]
	if !ok {
		h = &histogram{}
		l.byQueue[k] = h
	}
	h.add(ms)
	h.lastMs = nowMs
}

// quantiles answers k's p50 and p99 in ms (bucket upper bounds); zero if
// nothing was counted.
func (l *lateness) quantiles(k queueKey) (p50, p99 float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.byQueue[k]
	if !ok {
		return 0, 0
	}
	return h.quantile(0.5), h.quantile(0.99)
}

// prune drops the histograms of queues nobody reads whose last delivery
// was idle ms or more before nowMs.
func (l *lateness) prune(read func(queueKey) bool, nowMs, idleMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, h := range l.byQueue {
		if !read(k) && nowMs-h.lastMs >= idleMs {
			delete(l.byQueue, k)
		}
	}
}

// holds answers whether k has a histogram.
func (l *lateness) holds(k queueKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.byQueue[k]
	return ok
}

// histogram counts lateness in milliseconds in power-of-two buckets.
type histogram struct {
	counts [32]uint64
	total  uint64
	lastMs int64 // when the last delivery was counted
}

func (h *histogram) add(ms int64) {
	i := 0
	for v := max(ms, 0); v > 0 && i < len(h.counts)-1; v >>= 1 {
		i++
	}
	h.counts[i]++
	h.total++
}

// quantile is the upper bound of the bucket holding quantile q, in ms.
func (h *histogram) quantile(q float64) float64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == 0 {
				return 0
			}
			return float64(uint64(1) << (i - 1))
		}
	}
	return float64(uint64(1) << (len(h.counts) - 2))
}
