package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// FormatError refuses a data dir whose format this binary cannot read.
type FormatError struct {
	// Dir is the DB's directory.
	Dir string
	// Found is the data dir's format version; Known is this binary's
	// (keys.FormatVersion).
	Found, Known uint32
}

func (e *FormatError) Error() string {
	if e.Found > e.Known {
		return fmt.Sprintf("store: data dir %s is in state format %d, newer than format %d of this sundial-broker: "+
			"run a sundial-broker release that reads format %d (upgrade the binary; never downgrade one over a newer data dir)",
			e.Dir, e.Found, e.Known, e.Found)
	}
	return fmt.Sprintf("store: data dir %s is in state format %d and this sundial-broker (format %d) has no migration from it: "+
		"start it once with the release before this one, which migrates it, then with this one",
		e.Dir, e.Found, e.Known)
}

// migration rewrites a DB in format from into format from+1. A run that is
// cut short is run again at the next open (the version is written after
// it), so it must be idempotent.
type migration struct {
	from uint32
	name string
	run  func(db *pebble.DB) error
}

// migrations are the registered steps, one per format version.
var migrations = []migration{
	// A data dir made before the version key existed (format 0 here) holds
	// format 1 exactly: marking it is the whole step.
	{from: 0, name: "mark a data dir made before the format version key", run: func(*pebble.DB) error { return nil }},
	// Format 2 keeps a one-copy message's copy state in its body. It reads
	// format-1 messages (a CopyState record per copy) as they are, and a
	// message never changes form, so the old ones are left to complete.
	{from: 1, name: "keep the copy state of new one-copy messages in their body", run: func(*pebble.DB) error { return nil }},
}

// checkFormat brings db to format known: a new DB is marked with it, an
// older one is migrated step by step (each step's version synced after it),
// and a newer one, or an older one without a step, is refused with a
// FormatError.
func checkFormat(db *pebble.DB, dir string, known uint32, steps []migration, log *zap.Logger) error {
	found, ok, err := readFormat(db)
	if err != nil {
		return err
	}
	if !ok {
		empty, err := isEmpty(db)
		if err != nil {
			return err
		}
		if empty {
			return writeFormat(db, known)
		}
		found = 0 // made before the version key
	}
	if found > known {
		return &FormatError{Dir: dir, Found: found, Known: known}
	}
	for found < known {
		i := stepFrom(steps, found)
		if i < 0 {
			return &FormatError{Dir: dir, Found: found, Known: known}
		}
		if err := steps[i].run(db); err != nil {
			return fmt.Errorf("store: migrate %s from format %d (%s): %w", dir, found, steps[i].name, err)
		}
		if err := writeFormat(db, found+1); err != nil {
			return err
		}
		log.Info("state format migrated", zap.String("dir", dir), zap.Uint32("from", found), zap.Uint32("to", found+1), zap.String("step", steps[i].name))
		found++
	}
	return nil
}

func stepFrom(steps []migration, from uint32) int {
	for i, s := range steps {
		if s.from == from {
			return i
		}
	}
	return -1
}

func readFormat(db *pebble.DB) (uint32, bool, error) {
	v, closer, err := db.Get(keys.Format())
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: read format version: %w", err)
	}
	defer closer.Close()
	if len(v) != 4 {
		return 0, false, fmt.Errorf("store: format version of %d bytes", len(v))
	}
	return binary.BigEndian.Uint32(v), true, nil
}

func writeFormat(db *pebble.DB, v uint32) error {
	if err := db.Set(keys.Format(), binary.BigEndian.AppendUint32(nil, v), pebble.Sync); err != nil {
		return fmt.Errorf("store: write format version: %w", err)
	}
	return nil
}

func isEmpty(db *pebble.DB) (bool, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return false, err
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return false, err
	}
	return empty, nil
}
