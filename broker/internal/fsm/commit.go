package fsm

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// A run of entries is applied to an indexed batch, in the order the
// commands write (a lease: a due entry deleted, a body and a due entry
// written, message after message). Pebble inserts a batch into its
// memtable record by record, each a skiplist search from the top unless
// the key lies next to the one inserted before; in command order every
// insert searches from the top, and in a burst drain those searches were a
// seventh of the broker's CPU. sortedBatch hands Pebble the same writes in
// key order, so each insert starts from the last one's place.

// sortedBatch returns a batch for db holding the last write of each key in
// b, in key order: committed instead of b it leaves every key as b leaves
// it (within one batch a later write of a key hides the earlier ones, and
// no reader sees a batch half applied). ok is false, and b is to be
// committed as it is, if b holds anything but sets and point deletes.
func sortedBatch(db *pebble.DB, b *pebble.Batch) (sorted *pebble.Batch, ok bool, err error) {
	type write struct {
		del        bool
		key, value []byte
	}
	writes := make([]write, 0, b.Count())
	for r := b.Reader(); ; {
		kind, key, value, more, err := r.Next()
		if err != nil {
			return nil, false, err
		}
		if !more {
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			writes = append(writes, write{key: key, value: value})
		case pebble.InternalKeyKindDelete:
			writes = append(writes, write{del: true, key: key})
		default:
			return nil, false, nil
		}
	}
	// Stable: the writes of one key stay in batch order, the last one last.
	slices.SortStableFunc(writes, func(x, y write) int { return bytes.Compare(x.key, y.key) })
	sorted = db.NewBatchWithSize(len(b.Repr()))
	for i, w := range writes {
		if i+1 < len(writes) && bytes.Equal(writes[i+1].key, w.key) {
			continue
		}
		if w.del {
			err = sorted.Delete(w.key, nil)
		} else {
			err = sorted.Set(w.key, w.value, nil)
		}
		if err != nil {
			return nil, false, err
		}
	}
	return sorted, true, nil
}

// commitSorted commits b's writes to db in key order (see sortedBatch),
// without syncing: the Raft log is the write-ahead log.
func commitSorted(db *pebble.DB, b *pebble.Batch) error {
	sorted, ok, err := sortedBatch(db, b)
	if err != nil {
		return err
	}
	if !ok {
		return b.Commit(pebble.NoSync)
	}
	defer sorted.Close()
	return sorted.Commit(pebble.NoSync)
}
