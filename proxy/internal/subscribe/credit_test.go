package subscribe

import (
	"fmt"
	"testing"
)

// step is one event: grant n (shard 0) or spend deliveries of shard (n,
// 0 meaning one).
type step struct {
	grant int64
	spend uint64
	n     int64
}

func checkInvariant(t *testing.T, s *Splitter, granted, spent int64) {
	t.Helper()
	var held int64
	for _, id := range s.shards {
		if s.held[id] < 0 {
			t.Fatalf("Held(%d) = %d, want >= 0", id, s.held[id])
		}
		held += s.held[id]
	}
	if s.pool < 0 {
		t.Fatalf("Pool() = %d, want >= 0", s.pool)
	}
	if want := granted - spent; held+s.pool != want {
		t.Fatalf("pool %d + held %d = %d, want granted-spent %d", s.pool, held, held+s.pool, want)
	}
}

func TestSplitter(t *testing.T) {
	tests := []struct {
		name   string
		shards []uint64
		steps  []step
		want   string // held per shard then pool after all steps
	}{
		{"single shard gets everything", []uint64{1}, []step{{grant: 100}}, "map[1:100] pool=0"},
		{"two shards half in reserve", []uint64{1, 2}, []step{{grant: 100}}, "map[1:25 2:25] pool=50"},
		{"busy shard refilled", []uint64{1, 2}, []step{{grant: 100}, {spend: 1}, {spend: 1}, {spend: 1}}, "map[1:25 2:25] pool=47"},
		{"busy shard drains the pool", []uint64{1, 2}, append([]step{{grant: 10}}, repeat(step{spend: 1}, 7)...), "map[1:0 2:3] pool=0"},
		{"less credit than shards", []uint64{1, 2, 3, 4}, []step{{grant: 2}}, "map[1:1 2:1 3:0 4:0] pool=0"},
		{"idle shards rotate", []uint64{1, 2, 3, 4}, []step{{grant: 2}, {spend: 1}, {spend: 2}, {grant: 2}}, "map[1:0 2:0 3:1 4:1] pool=0"},
		{"a frame of several spends each", []uint64{1, 2}, []step{{grant: 100}, {spend: 1, n: 10}}, "map[1:23 2:25] pool=42"},
		{"a frame beyond the held credit spends what is held", []uint64{1}, []step{{grant: 3}, {spend: 1, n: 5}}, "map[1:0] pool=0"},
		{"unknown shard ignored", []uint64{1}, []step{{grant: 3}, {spend: 9}}, "map[1:3] pool=0"},
		{"non-positive grant ignored", []uint64{1}, []step{{grant: 0}, {grant: -5}}, "map[1:0] pool=0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSplitter(tc.shards)
			var granted, spent int64
			for _, st := range tc.steps {
				if st.grant != 0 {
					s.Grant(st.grant)
					granted += max(0, st.grant)
				} else {
					n := max(st.n, 1)
					if _, ok := s.held[st.spend]; ok {
						spent += min(n, s.held[st.spend])
					}
					s.Spend(st.spend, n)
				}
				checkInvariant(t, s, granted, spent)
			}
			if got := fmt.Sprintf("%v pool=%d", s.held, s.pool); got != tc.want {
				t.Errorf("after %v: Splitter = %s, want %s", tc.steps, got, tc.want)
			}
		})
	}
}

func repeat(s step, n int) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestSplitterGrantsMatchHeld checks that the grants returned are exactly
// what moved out of the pool, so the frames sent to shards sum to the
// held credit.
func TestSplitterGrantsMatchHeld(t *testing.T) {
	s := NewSplitter([]uint64{1, 2, 3})
	sent := map[uint64]int64{}
	add := func(gs []Grant) {
		for _, g := range gs {
			if g.N <= 0 {
				t.Fatalf("grant %v, want N > 0", g)
			}
			sent[g.Shard] += g.N
		}
	}
	add(s.Grant(30))
	for i := range 200 {
		shard := uint64(1)
		if i%10 == 0 {
			shard = 2
		}
		if s.Held(shard) == 0 {
			add(s.Grant(5))
			continue
		}
		sent[shard]--
		add(s.Spend(shard, 1))
	}
	for id, n := range sent {
		if s.Held(id) != n {
			t.Errorf("Held(%d) = %d, want the %d sent and unspent", id, s.Held(id), n)
		}
	}
	if s.Held(3) == 0 {
		t.Errorf("Held(3) = 0, want the quiet shard to keep its share")
	}
}

func TestSplitterCapsCredit(t *testing.T) {
	s := NewSplitter([]uint64{1})
	s.Grant(maxCredit)
	s.Grant(maxCredit)
	if got := s.Outstanding(); got != maxCredit {
		t.Errorf("Outstanding() after two max grants = %d, want %d", got, maxCredit)
	}
}

func TestSplitterReturnMovesCreditOn(t *testing.T) {
	s := NewSplitter([]uint64{1, 2, 3})
	first := s.Grant(1)
	if len(first) != 1 {
		t.Fatalf("Grant(1) = %v, want one shard served", first)
	}
	holder := first[0].Shard
	next := s.Return(holder, 1)
	if len(next) != 1 || next[0].Shard == holder || next[0].N != 1 {
		t.Fatalf("Return(%d, 1) = %v, want the credit on another shard", holder, next)
	}
	if s.Held(holder) != 0 || s.Outstanding() != 1 {
		t.Fatalf("after return: held %d, outstanding %d; want 0 and 1", s.Held(holder), s.Outstanding())
	}
	if got := s.Return(holder, 5); got != nil || s.Outstanding() != 1 {
		t.Fatalf("Return of credit the shard does not hold = %v, outstanding %d", got, s.Outstanding())
	}
}

func TestSplitterAddRemove(t *testing.T) {
	s := NewSplitter([]uint64{1})
	s.Grant(100)
	if got := s.Held(1); got != 100 {
		t.Fatalf("Held(1) = %d, want 100", got)
	}
	// A shard added while the only one holds everything gets credit back
	// from it only through Return (the session revokes idle credit).
	if g := s.Add(2); len(g) != 0 {
		t.Fatalf("Add(2) = %v, want no grant from an empty pool", g)
	}
	checkInvariant(t, s, 100, 0)
	g := s.Return(1, 100)
	if s.Held(2) == 0 || len(g) == 0 {
		t.Fatalf("after Return(1, 100): Held(2) = %d, grants %v, want credit on shard 2", s.Held(2), g)
	}
	checkInvariant(t, s, 100, 0)
	held1 := s.Held(1)
	g = s.Remove(1)
	if _, ok := s.held[1]; ok {
		t.Fatalf("Remove(1) left shard 1 on the splitter")
	}
	if s.Held(2) != 100 {
		t.Fatalf("after Remove(1) (held %d): Held(2) = %d, want all 100 on the last shard (grants %v)", held1, s.Held(2), g)
	}
	checkInvariant(t, s, 100, 0)
	if g := s.Remove(2); len(g) != 0 || s.Pool() != 100 {
		t.Fatalf("Remove(last) = %v, pool %d, want no grant and all 100 in the pool", g, s.Pool())
	}
}
