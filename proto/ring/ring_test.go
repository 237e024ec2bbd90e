package ring

import (
	"fmt"
	"testing"
)

func shardsN(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func TestLocateIndependentOfOrder(t *testing.T) {
	tests := []struct {
		name string
		a, b []uint64
	}{
		{"reversed", []uint64{1, 2, 3, 4, 5, 6, 7, 8}, []uint64{8, 7, 6, 5, 4, 3, 2, 1}},
		{"shuffled", []uint64{3, 9, 12, 40}, []uint64{40, 3, 12, 9}},
		{"duplicates", []uint64{1, 2, 3}, []uint64{3, 3, 2, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ra, rb := New(tc.a), New(tc.b)
			if !ra.Equal(rb) {
				t.Fatalf("New(%v).Equal(New(%v)) = false, want true", tc.a, tc.b)
			}
			for p := range uint32(2000) {
				topic := fmt.Sprintf("topic-%d", p%37)
				if ga, gb := ra.Locate(topic, p), rb.Locate(topic, p); ga != gb {
					t.Fatalf("Locate(%q, %d) = %d with %v, want %d as with %v", topic, p, gb, tc.b, ga, tc.a)
				}
			}
		})
	}
}

func TestLocateEmpty(t *testing.T) {
	if got := New(nil).Locate("t", 0); got != 0 {
		t.Fatalf("New(nil).Locate(t, 0) = %d, want 0", got)
	}
}

func TestLocateReturnsMember(t *testing.T) {
	r := New([]uint64{10, 20, 30})
	seen := map[uint64]int{}
	for p := range uint32(3000) {
		seen[r.Locate("orders", p)]++
	}
	for id := range seen {
		if id != 10 && id != 20 && id != 30 {
			t.Fatalf("Locate returned %d, not a member of [10 20 30]", id)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("3000 keys landed on %d shards, want 3: %v", len(seen), seen)
	}
}

func TestAddingShardMovesFewKeys(t *testing.T) {
	before, after := New(shardsN(8)), New(shardsN(9))
	const keys = 10000
	moved, strayed := 0, 0
	for i := range keys {
		topic := fmt.Sprintf("t%d", i%100)
		p := uint32(i / 100)
		a, b := before.Locate(topic, p), after.Locate(topic, p)
		if a == b {
			continue
		}
		moved++
		if b != 9 {
			strayed++
		}
	}
	frac := float64(moved) / keys
	t.Logf("moved %d of %d keys (%.1f%%), %d between old shards", moved, keys, 100*frac, strayed)
	if frac < 0.05 || frac > 0.25 {
		t.Errorf("adding a 9th shard moved %.1f%% of keys, want between 5%% and 25%%", 100*frac)
	}
	if strayed != 0 {
		t.Errorf("adding a 9th shard moved %d keys between old shards, want 0", strayed)
	}
}

func BenchmarkLocate(b *testing.B) {
	r := New(shardsN(64))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Locate("orders.created", uint32(i&1023))
	}
}
