package dispatch

import "testing"

func TestLatenessQuantiles(t *testing.T) {
	k := queueKey{"t", "g"}
	tests := []struct {
		name     string
		ms       []int64
		p50, p99 float64
	}{
		{"nothing counted", nil, 0, 0},
		{"on time", []int64{0, 0, -3}, 0, 0},
		{"bucket upper bounds", []int64{1, 2, 3, 4, 100}, 2, 64},
		{"mostly on time, one late", append(make([]int64, 99), 1000), 0, 0},
		{"the tail", append(make([]int64, 98), 1000, 1000), 0, 512},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLateness()
			for _, ms := range tt.ms {
				l.observe(k, 0, ms)
			}
			if p50, p99 := l.quantiles(k); p50 != tt.p50 || p99 != tt.p99 {
				t.Fatalf("quantiles(%v) = %v, %v, want %v, %v", tt.ms, p50, p99, tt.p50, tt.p99)
			}
		})
	}
}

func TestLatenessPrune(t *testing.T) {
	read, unread := queueKey{"t", "read"}, queueKey{"t", "unread"}
	l := newLateness()
	l.observe(read, 1000, 5)
	l.observe(unread, 1000, 5)
	isRead := func(k queueKey) bool { return k == read }
	l.prune(isRead, 1999, 1000)
	if !l.holds(unread) {
		t.Fatalf("prune dropped an unread queue's histogram before it was idle long enough")
	}
	l.prune(isRead, 2000, 1000)
	if l.holds(unread) {
		t.Fatalf("prune kept an unread queue's histogram after the idle time")
	}
	if !l.holds(read) {
		t.Fatalf("prune dropped the histogram of a queue still read")
	}
}
