package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/broker/internal/store"
)

// fillShard writes n message bodies of valueBytes each (and an applied
// index) straight into shard's range: a large state without applying
// millions of commands.
func fillShard(t testing.TB, db *pebble.DB, shardID uint64, n, valueBytes int, applied uint64) {
	t.Helper()
	v := bytes.Repeat([]byte{0xa5}, valueBytes)
	b := db.NewBatch()
	for i := range n {
		id := binary.BigEndian.AppendUint64(make([]byte, 8, keys.IDBytes), uint64(i))
		id = id[:keys.IDBytes]
		binary.BigEndian.PutUint64(v, uint64(i)) // distinct values
		if err := b.Set(keys.Message(shardID, id), v, nil); err != nil {
			t.Fatalf("Set() error = %v", err)
		}
		if b.Len() > 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				t.Fatalf("Commit() error = %v", err)
			}
			b = db.NewBatch()
		}
	}
	if err := b.Set(keys.Applied(shardID), binary.BigEndian.AppendUint64(nil, applied), nil); err != nil {
		t.Fatalf("Set() error = %v", err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatalf("Commit() error = %v", err)
	}
}

// snapshotStream streams s's snapshot through a pipe, as Dragonboat does
// from a snapshot file: the whole snapshot is never in memory.
func snapshotStream(t testing.TB, s *StateMachine) io.Reader {
	t.Helper()
	ctx, err := s.PrepareSnapshot()
	if err != nil {
		t.Fatalf("PrepareSnapshot() error = %v", err)
	}
	pr, pw := io.Pipe()
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		pw.CloseWithError(s.SaveSnapshot(ctx, pw, nil))
	}()
	// The writer must be done with the source DB before it closes.
	t.Cleanup(func() { pr.Close(); <-saved })
	return pr
}

func TestRecoverLargeSnapshotInBoundedBatches(t *testing.T) {
	src := New(memDB(t), shard, nil)
	const n, valueBytes = 24 << 10, 1 << 10 // 24 MiB of values
	fillShard(t, src.db, shard, n, valueBytes, 777)

	dst := New(memDB(t), shard, nil)
	fillShard(t, dst.db, shard, 100, 10, 5) // stale state, replaced
	var batches []int
	dst.recoverCommitted = func(batchBytes int) { batches = append(batches, batchBytes) }
	if err := dst.RecoverFromSnapshot(snapshotStream(t, src), nil); err != nil {
		t.Fatalf("RecoverFromSnapshot() error = %v", err)
	}
	t.Logf("%d batches: %v", len(batches), batches)
	if len(batches) < 3 {
		t.Errorf("RecoverFromSnapshot() committed %d batches %v, want at least 3 for %d MiB", len(batches), batches, n*valueBytes>>20)
	}
	for i, sz := range batches {
		if sz > recoverBatchBytes+2*valueBytes {
			t.Errorf("recovery batch %d holds %d bytes, want at most %d", i, sz, recoverBatchBytes)
		}
	}
	want, err := StateHash(src.db, shard)
	if err != nil {
		t.Fatalf("StateHash(source) error = %v", err)
	}
	got, err := StateHash(dst.db, shard)
	if err != nil {
		t.Fatalf("StateHash(recovered) error = %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("StateHash(recovered) = %x, want %x (the source's)", got, want)
	}
	if idx, _ := dst.Lookup(AppliedQuery{}); idx.(uint64) != 777 {
		t.Fatalf("applied index after recovery = %v, want 777", idx)
	}
}

// shardKeys counts the keys of shard's range in db.
func shardKeys(t testing.TB, db *pebble.DB, shardID uint64) int {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(shardID), UpperBound: keys.ShardEnd(shardID)})
	if err != nil {
		t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n
}

func hasRecoveryMarker(t testing.TB, db *pebble.DB, shardID uint64) bool {
	t.Helper()
	_, closer, err := db.Get(keys.Recovering(shardID))
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("Get(marker) error = %v", err)
	}
	closer.Close()
	return true
}

// TestStoppedRecoveryIsClearedByOpen stops a recovery after two batches
// (Dragonboat closes done when the replica stops): the range then holds the
// snapshot's applied index and part of its keys. Open must not report that
// index: it clears the range and answers 0, and the next recovery
// completes.
func TestStoppedRecoveryIsClearedByOpen(t *testing.T) {
	src := New(memDB(t), shard, nil)
	fillShard(t, src.db, shard, 24<<10, 1<<10, 777)
	db := memDB(t)
	fillShard(t, db, shard, 100, 10, 5)
	fillShard(t, db, shard+1, 10, 10, 9) // a neighbour shard, untouched
	neighbour, err := StateHash(db, shard+1)
	if err != nil {
		t.Fatalf("StateHash() error = %v", err)
	}

	dst := New(db, shard, nil)
	done := make(chan struct{})
	commits := 0
	dst.recoverCommitted = func(int) {
		if commits++; commits == 2 {
			close(done)
		}
	}
	if err := dst.RecoverFromSnapshot(snapshotStream(t, src), done); !errors.Is(err, sm.ErrSnapshotStopped) {
		t.Fatalf("RecoverFromSnapshot() with done closed = %v, want %v", err, sm.ErrSnapshotStopped)
	}
	if got := shardKeys(t, db, shard); got == 0 {
		t.Fatalf("stopped recovery left no keys: the test does not stop it in the middle")
	}

	reopened := New(db, shard, nil)
	idx, err := reopened.Open(nil)
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	if idx != 0 {
		t.Errorf("Open() after a stopped recovery = %d, want 0 (recover again)", idx)
	}
	if got := shardKeys(t, db, shard); got != 0 {
		t.Errorf("Open() after a stopped recovery left %d keys in the shard, want 0", got)
	}
	if hasRecoveryMarker(t, db, shard) {
		t.Errorf("Open() left the recovery marker")
	}
	if got, _ := StateHash(db, shard+1); !bytes.Equal(got, neighbour) {
		t.Errorf("Open() changed the neighbour shard")
	}

	if err := reopened.RecoverFromSnapshot(snapshotStream(t, src), nil); err != nil {
		t.Fatalf("RecoverFromSnapshot() again error = %v", err)
	}
	want, _ := StateHash(src.db, shard)
	if got, _ := StateHash(db, shard); !bytes.Equal(got, want) {
		t.Fatalf("StateHash() after the second recovery differs from the source")
	}
	if hasRecoveryMarker(t, db, shard) {
		t.Errorf("a completed recovery left the recovery marker")
	}
}

// TestPowerLossDuringRecovery cuts the power (a crash clone of the state
// DB's file system, keeping a varying share of unsynced writes) before each
// batch of a recovery and after it, and opens the state machine on what a
// restart would find: either the old state at its applied index, or an
// empty range and 0, or the complete snapshot — never part of one at the
// snapshot's index.
func TestPowerLossDuringRecovery(t *testing.T) {
	src := New(memDB(t), shard, nil)
	fillShard(t, src.db, shard, 12<<10, 1<<10, 777)
	want, err := StateHash(src.db, shard)
	if err != nil {
		t.Fatalf("StateHash() error = %v", err)
	}

	fs := vfs.NewCrashableMem()
	log := zaptest.NewLogger(t)
	db, err := store.Open(store.Config{Dir: "state", FS: fs}, log)
	if err != nil {
		t.Fatalf("store.Open() error = %v", err)
	}
	defer db.Close()
	fillShard(t, db, shard, 100, 10, 5)
	if err := db.Flush(); err != nil {
		t.Fatalf("Flush() error = %v", err)
	}
	old, err := StateHash(db, shard)
	if err != nil {
		t.Fatalf("StateHash() error = %v", err)
	}

	rng := rand.New(rand.NewPCG(8, 14))
	var crashes []*vfs.MemFS
	dst := New(db, shard, nil)
	dst.recoverCommitted = func(int) {
		crashes = append(crashes, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}))
	}
	if err := dst.RecoverFromSnapshot(snapshotStream(t, src), nil); err != nil {
		t.Fatalf("RecoverFromSnapshot() error = %v", err)
	}
	crashes = append(crashes, fs.CrashClone(vfs.CrashCloneCfg{}))
	if len(crashes) < 3 {
		t.Fatalf("recovery committed %d batches, want several", len(crashes)-1)
	}

	for i, crashed := range crashes {
		cdb, err := store.Open(store.Config{Dir: "state", FS: crashed}, log)
		if err != nil {
			t.Fatalf("crash %d: store.Open() error = %v", i, err)
		}
		idx, err := New(cdb, shard, nil).Open(nil)
		if err != nil {
			t.Fatalf("crash %d: Open() error = %v", i, err)
		}
		got, err := StateHash(cdb, shard)
		if err != nil {
			t.Fatalf("crash %d: StateHash() error = %v", i, err)
		}
		n := shardKeys(t, cdb, shard)
		switch {
		case idx == 777 && bytes.Equal(got, want):
		case idx == 5 && bytes.Equal(got, old):
		case idx == 0 && n == 0:
		default:
			t.Errorf("crash %d of %d: Open() = %d with %d keys in the shard, want 777 with the snapshot, 5 with the old state or 0 with none", i, len(crashes), idx, n)
		}
		if i == len(crashes)-1 && idx != 777 {
			t.Errorf("power loss after a completed recovery: Open() = %d, want 777", idx)
		}
		if hasRecoveryMarker(t, cdb, shard) {
			t.Errorf("crash %d: Open() left the recovery marker", i)
		}
		cdb.Close()
	}
}
