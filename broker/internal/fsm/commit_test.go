package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// dbContents lists every key and value of db.
func dbContents(t *testing.T, db *pebble.DB) []string {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for valid := it.First(); valid; valid = it.Next() {
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), it.Value()))
	}
	return out
}

// The state machine commits a run's writes in key order, the last write of
// each key only, so Pebble's memtable inserts each key next to the one
// before (issue 10, burst drain); the keys end exactly as committing the
// batch as written leaves them, whatever the mix of sets, deletes and
// rewrites of one key, of keys present before or not.
func TestSortedBatchLeavesWhatTheBatchLeaves(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 50 {
		asWritten, sortedDB := memDB(t), memDB(t)
		key := func() []byte { return fmt.Appendf(nil, "k%03d", rng.IntN(60)) }
		for range 40 { // keys present before the batch
			k, v := key(), fmt.Appendf(nil, "old%d", rng.IntN(9))
			for _, db := range []*pebble.DB{asWritten, sortedDB} {
				if err := db.Set(k, v, pebble.NoSync); err != nil {
					t.Fatal(err)
				}
			}
		}
		batches := [2]*pebble.Batch{asWritten.NewIndexedBatch(), sortedDB.NewIndexedBatch()}
		for i := range 120 {
			k, del := key(), rng.IntN(3) == 0
			for _, b := range batches {
				var err error
				if del {
					err = b.Delete(k, nil)
				} else {
					err = b.Set(k, fmt.Appendf(nil, "new%d", i), nil)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := batches[0].Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		sorted, ok, err := sortedBatch(sortedDB, batches[1])
		if err != nil || !ok {
			t.Fatalf("round %d: sortedBatch() = %v, %v; want a batch", round, ok, err)
		}
		var prev []byte
		n := 0
		for r := sorted.Reader(); ; n++ {
			_, k, _, more, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				t.Fatalf("round %d: sorted batch writes %q after %q, want strictly increasing keys", round, k, prev)
			}
			prev = k
		}
		if err := sorted.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		sorted.Close()
		for _, b := range batches {
			b.Close()
		}
		want, got := dbContents(t, asWritten), dbContents(t, sortedDB)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: after the sorted batch (%d writes) the DB holds\n%v\nwant (as written)\n%v", round, n, got, want)
		}
	}
}

// A batch holding anything but sets and point deletes is committed as it
// was written.
func TestSortedBatchLeavesRangeDeletesAlone(t *testing.T) {
	db := memDB(t)
	b := db.NewIndexedBatch()
	defer b.Close()
	if err := b.Set([]byte("b"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteRange([]byte("a"), []byte("c"), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := sortedBatch(db, b); ok || err != nil {
		t.Fatalf("sortedBatch(a range delete) = %v, %v; want not ok", ok, err)
	}
}
