// Package store opens the one Pebble DB a broker shares among all its
// event-shard state machines. Each shard owns the key range under its
// prefix (see package keys); nothing else writes to the DB but Open itself,
// which owns the DB's format version (keys.Format): it marks a new DB with
// keys.FormatVersion, migrates an older one by the registered steps and
// refuses a newer one (FormatError) before any shard reads it.
package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// Config sizes the DB.
type Config struct {
	// Dir holds the DB files.
	Dir string
	// CacheBytes is the block cache size, on top of the memtables. Default 16 MiB.
	CacheBytes int64
	// MemTableBytes is the size of one memtable. Default 16 MiB.
	MemTableBytes uint64
	// FS is the file system the DB lives on. Default the OS's; tests pass
	// a crashable in-memory one (vfs.NewCrashableMem) to cut the power.
	FS vfs.FS
}

// Open opens (creating if needed) the DB in cfg.Dir and brings it to
// keys.FormatVersion (see checkFormat); a data dir it cannot read is refused
// with a *FormatError. Pebble's own log lines go to log at warn level and
// above only.
func Open(cfg Config, log *zap.Logger) (*pebble.DB, error) {
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = 16 << 20
	}
	if cfg.MemTableBytes == 0 {
		cfg.MemTableBytes = 16 << 20
	}
	// Pebble charges its memtables (the active one and one being flushed)
	// to the block cache: size the cache so that CacheBytes stay for blocks.
	cache := pebble.NewCache(cfg.CacheBytes + 2*int64(cfg.MemTableBytes))
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:        cache,
		MemTableSize: cfg.MemTableBytes,
		Logger:       pebbleLogger{log.Named("pebble")},
		FS:           cfg.FS,
	}
	// Bloom filters on every level: the state machine's point reads mostly
	// miss (a new publish's request id, a new message key), and without a
	// filter a miss seeks into every overlapping table.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Every flush covers each shard's streams of new keys (bodies and due
	// entries by increasing id and due time), so an L0 compaction rewrites
	// nearly all of Lbase whatever it carries: in a 10M fill compactions were
	// half of a broker's CPU. Letting L0 gather 12 sublevels instead of 4
	// carries three times the data per rewrite (with the 2-arena cap, measured
	// together: 3M fill 1.17x faster; burst drain unchanged; point reads skip
	// L0 tables by their bloom filters).
	opts.L0CompactionThreshold = 12
	opts.L0StopWritesThreshold = 36
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", cfg.Dir, err)
	}
	if err := checkFormat(db, cfg.Dir, keys.FormatVersion, migrations, log); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// pebbleLogger keeps Pebble's informational chatter out of the logs.
type pebbleLogger struct{ log *zap.Logger }

func (l pebbleLogger) Infof(string, ...interface{}) {}

func (l pebbleLogger) Errorf(format string, args ...interface{}) {
	l.log.Error("pebble error", zap.String("detail", fmt.Sprintf(format, args...)))
}

func (l pebbleLogger) Fatalf(format string, args ...interface{}) {
	l.log.Fatal("pebble fatal", zap.String("detail", fmt.Sprintf(format, args...)))
}
