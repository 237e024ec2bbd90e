package fsm

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// recoverBatchBytes bounds one batch of a snapshot recovery. Memory stays
// flat whatever the shard's size (one batch of a whole shard grew the heap
// by four times the snapshot, and Pebble refuses batches past 4 GiB), and
// the batches stay under Pebble's large-batch threshold (half a memtable,
// 8 MiB with the default 16 MiB memtable), so they go through the memtable
// like any write.
const recoverBatchBytes = 4 << 20

// RecoverFromSnapshot replaces the shard's key range with a snapshot's.
//
// The snapshot is written in batches of at most recoverBatchBytes, so the
// replacement is not one atomic write. A marker (keys.Recovering), synced
// before the first batch and deleted in the last, which is synced, says the
// range is half written: Open finds it after a crash or a stop in the
// middle, deletes the range and answers applied index 0, and Dragonboat
// recovers the snapshot again.
//
// A snapshot in a format this binary does not read (newer than
// keys.FormatVersion, older than keys.OldestReadableFormat) is refused with
// a *SnapshotFormatError before anything is written.
func (s *StateMachine) RecoverFromSnapshot(r io.Reader, done <-chan struct{}) error {
	br := byteReader(r)
	format, err := readSnapshotFormat(br)
	if err != nil {
		return fmt.Errorf("fsm: read snapshot header: %w", err)
	}
	if format < keys.OldestReadableFormat || format > keys.FormatVersion {
		return &SnapshotFormatError{Shard: s.shard, Found: format, Known: keys.FormatVersion}
	}
	marker := keys.Recovering(s.shard)
	if err := s.db.Set(marker, nil, pebble.Sync); err != nil {
		return fmt.Errorf("fsm: set recovery marker: %w", err)
	}
	prefix := keys.ShardPrefix(s.shard)
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	if err := b.DeleteRange(prefix, keys.ShardEnd(s.shard), nil); err != nil {
		return err
	}
	var k, v []byte // reused: the batch copies what it is given
	for n := 1; ; n++ {
		var err error
		k, err = readChunk(br, k)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("fsm: read snapshot key: %w", err)
		}
		v, err = readChunk(br, v)
		if err != nil {
			return fmt.Errorf("fsm: read snapshot value: %w", err)
		}
		if len(k) < len(prefix) || string(k[:len(prefix)]) != string(prefix) {
			return fmt.Errorf("fsm: snapshot key outside shard %d", s.shard)
		}
		if err := b.Set(k, v, nil); err != nil {
			return err
		}
		if b.Len() >= recoverBatchBytes {
			if err := s.commitRecovery(b, pebble.NoSync); err != nil {
				return err
			}
			b.Close()
			b = s.db.NewBatch()
		}
		if n%4096 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
	}
	if err := b.Delete(marker, nil); err != nil {
		return err
	}
	if err := s.commitRecovery(b, pebble.Sync); err != nil {
		return err
	}
	if _, err := s.Open(nil); err != nil {
		return err
	}
	s.notify(s.shard, Change{Reset: true})
	return nil
}

func (s *StateMachine) commitRecovery(b *pebble.Batch, opts *pebble.WriteOptions) error {
	if s.recoverCommitted != nil {
		s.recoverCommitted(b.Len())
	}
	if err := b.Commit(opts); err != nil {
		return fmt.Errorf("fsm: commit snapshot batch: %w", err)
	}
	return nil
}

// clearInterruptedRecovery deletes the shard's range and the recovery
// marker, in one synced batch, if a recovery was cut short.
func (s *StateMachine) clearInterruptedRecovery() error {
	marker := keys.Recovering(s.shard)
	_, closer, err := s.db.Get(marker)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fsm: read recovery marker: %w", err)
	}
	closer.Close()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(keys.ShardPrefix(s.shard), keys.ShardEnd(s.shard), nil); err != nil {
		return err
	}
	if err := b.Delete(marker, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("fsm: clear interrupted recovery: %w", err)
	}
	s.applied.Store(0)
	return nil
}
