package dispatch

import (
	"fmt"
	"testing"
)

// storeExpiry stands in for the store's TTL index: its earliest expiry
// and how often it was read.
type storeExpiry struct {
	at    int64
	reads int
}

func (s *storeExpiry) first() int64 { s.reads++; return s.at }

func TestTTLTimer(t *testing.T) {
	type step struct {
		do    func(tt *ttlTimer, s *storeExpiry)
		nowMs int64
		// want of due(nowMs)
		run   bool
		at    int64
		named string
		reads int // store reads so far
	}
	none := func(*ttlTimer, *storeExpiry) {}
	tests := []struct {
		name  string
		store int64
		steps []step
	}{
		{"nothing expires", 0, []step{
			{none, 100, false, 0, "[]", 1},
			{none, 200, false, 0, "[]", 1},
		}},
		{"the store is read once, then the time is waited for", 500, []step{
			{none, 100, false, 500, "[]", 1},
			{none, 499, false, 500, "[]", 1},
			{none, 500, true, 0, "[]", 1},
		}},
		{"an earlier insertion lowers it", 500, []step{
			{none, 100, false, 500, "[]", 1},
			{func(tt *ttlTimer, _ *storeExpiry) { tt.lower(300, false); tt.lower(400, false) }, 100, false, 300, "[]", 1},
		}},
		{"an insertion when none was known", 0, []step{
			{none, 100, false, 0, "[]", 1},
			{func(tt *ttlTimer, _ *storeExpiry) { tt.lower(700, false) }, 100, false, 700, "[]", 1},
		}},
		{"a later insertion does not raise it", 500, []step{
			{none, 100, false, 500, "[]", 1},
			{func(tt *ttlTimer, _ *storeExpiry) { tt.lower(900, false) }, 100, false, 500, "[]", 1},
		}},
		{"a reset reads the store again", 500, []step{
			{none, 100, false, 500, "[]", 1},
			{func(tt *ttlTimer, s *storeExpiry) { s.at = 200; tt.lower(0, true) }, 100, false, 200, "[]", 2},
		}},
		{"named copies run a command now", 0, []step{
			{none, 100, false, 0, "[]", 1},
			{func(tt *ttlTimer, _ *storeExpiry) { tt.name([]byte("a")); tt.name([]byte("b")) }, 100, true, 0, "[a b]", 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &storeExpiry{at: tc.store}
			tt := newTTLTimer(s.first)
			for i, st := range tc.steps {
				st.do(tt, s)
				named, run, at := tt.due(st.nowMs)
				if got := fmt.Sprintf("%q", named); run != st.run || at != st.at || fmt.Sprintf("%s", named) != st.named || s.reads != st.reads {
					t.Fatalf("step %d: due(%d) = %s, %v, %d with %d reads, want %s, %v, %d with %d reads", i, st.nowMs, got, run, at, s.reads, st.named, st.run, st.at, st.reads)
				}
			}
		})
	}
}

func TestTTLTimerRan(t *testing.T) {
	s := &storeExpiry{at: 100}
	tt := newTTLTimer(s.first)
	tt.name([]byte("a"))
	if named, run, _ := tt.due(100); !run || len(named) != 1 {
		t.Fatalf("due(100) = %q, %v, want a run naming a", named, run)
	}
	s.at = 900
	if got := tt.ran(); got != 900 {
		t.Fatalf("ran() = %d, want the store's next expiry 900", got)
	}
	if named, run, at := tt.due(200); run || at != 900 || len(named) != 0 {
		t.Fatalf("due(200) after the run = %q, %v, %d, want to wait for 900 with nothing named", named, run, at)
	}
}
