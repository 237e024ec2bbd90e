package keys

import (
	"bytes"
	"math"
	"testing"
)

// The recovery marker must survive the DeleteRange of its shard's range and
// stay out of every snapshot and state hash.
func TestRecoveringIsOutsideEveryShard(t *testing.T) {
	for _, shard := range []uint64{0, 1, 100, math.MaxUint64 - 1} {
		k := Recovering(shard)
		if bytes.Compare(k, ShardPrefix(0)) >= 0 {
			t.Errorf("Recovering(%d) = %x, want before every shard range (from %x)", shard, k, ShardPrefix(0))
		}
	}
	if bytes.Equal(Recovering(1), Recovering(2)) {
		t.Errorf("Recovering(1) = Recovering(2)")
	}
}
