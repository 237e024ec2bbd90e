package fsm

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// Result values of an applied entry.
const (
	// ResultApplied: Data holds the encoded fsmpb.Outcomes, one per command.
	ResultApplied uint64 = 1
	// ResultMalformed: the entry did not decode; it was skipped.
	ResultMalformed uint64 = 2
)

// Change tells what an applied batch did to a shard's due index.
type Change struct {
	// Lows maps each queue that got due-index entries to the earliest
	// visible_at among them.
	Lows map[keys.Queue]int64
	// ExpiryLow is the earliest TTL expiry inserted, 0 if none.
	ExpiryLow int64
	// Reset: the whole state was replaced (snapshot recovery).
	Reset bool
}

// Notifier is told, after a batch is applied, what it inserted into the due
// and TTL indexes (a batch that inserted nothing is not reported), and of a
// snapshot recovery. It runs on the apply goroutine and must not block.
type Notifier func(shard uint64, c Change)

// StateMachine is one event shard's replica.
type StateMachine struct {
	shard   uint64
	db      *pebble.DB
	notify  Notifier
	applied atomic.Uint64
	// journal is the change journal's state, nil while it is off
	// (journal.go); read and replaced on the apply goroutine.
	journal *fsmpb.JournalState
	// journalCap is maxJournalKeys but in tests.
	journalCap uint64

	// recoverCommitted, if set, is told the size of every batch
	// RecoverFromSnapshot commits (tests).
	recoverCommitted func(batchBytes int)
}

// Factory returns the Dragonboat factory of event-shard state machines
// stored in db.
func Factory(db *pebble.DB, notify Notifier) sm.CreateOnDiskStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IOnDiskStateMachine {
		return New(db, shardID, notify)
	}
}

// New returns the state machine of shard over db.
func New(db *pebble.DB, shard uint64, notify Notifier) *StateMachine {
	if notify == nil {
		notify = func(uint64, Change) {}
	}
	return &StateMachine{shard: shard, db: db, notify: notify, journalCap: maxJournalKeys}
}

// Open returns the applied index on disk. A shard whose snapshot recovery
// was cut short (the recovery marker is set) holds part of a snapshot: Open
// deletes its whole range and answers 0, so Dragonboat recovers the
// snapshot again.
func (s *StateMachine) Open(<-chan struct{}) (uint64, error) {
	if err := s.clearInterruptedRecovery(); err != nil {
		return 0, err
	}
	idx, err := readApplied(s.db, s.shard)
	if err != nil {
		return 0, err
	}
	if s.journal, err = loadJournal(s.db, s.shard); err != nil {
		return 0, err
	}
	s.applied.Store(idx)
	return idx, nil
}

// Update applies entries as one Pebble batch.
func (s *StateMachine) Update(entries []sm.Entry) ([]sm.Entry, error) {
	b := s.db.NewIndexedBatch()
	defer b.Close()
	a := applier{b: b, shard: s.shard, lows: map[keys.Queue]int64{}, counters: map[counterKey]*fsmpb.Counters{}, groupsOf: map[string][]string{}, endsAt: map[int64][]byte{}}
	if s.journal != nil {
		a.journal, a.touched = s.journal, map[string]struct{}{}
	}
	a.journalCap = s.journalCap
	for i := range entries {
		e := &entries[i]
		var batch fsmpb.Batch
		if err := proto.Unmarshal(e.Cmd, &batch); err != nil {
			e.Result = sm.Result{Value: ResultMalformed}
			continue
		}
		a.index, a.pos = e.Index, 0
		outs := &fsmpb.Outcomes{Outcomes: make([]*fsmpb.Outcome, 0, len(batch.Commands))}
		for _, c := range batch.Commands {
			out, err := a.apply(c)
			if err != nil {
				return nil, fmt.Errorf("fsm: shard %d index %d: %w", s.shard, e.Index, err)
			}
			outs.Outcomes = append(outs.Outcomes, out)
		}
		if err := a.flushEnds(); err != nil {
			return nil, fmt.Errorf("fsm: shard %d index %d: %w", s.shard, e.Index, err)
		}
		// Per entry, not per run: replicas group entries into runs
		// differently, and the journal is shard state.
		if err := a.flushJournal(e.Index); err != nil {
			return nil, err
		}
		data, err := proto.Marshal(outs)
		if err != nil {
			return nil, fmt.Errorf("fsm: encode outcome: %w", err)
		}
		e.Result = sm.Result{Value: ResultApplied, Data: data}
	}
	if err := a.flushCounters(); err != nil {
		return nil, err
	}
	last := entries[len(entries)-1].Index
	if err := b.Set(keys.Applied(s.shard), binary.BigEndian.AppendUint64(nil, last), nil); err != nil {
		return nil, err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return nil, fmt.Errorf("fsm: commit batch: %w", err)
	}
	s.applied.Store(last)
	s.journal = a.journal
	if a.restored {
		s.notify(s.shard, Change{Reset: true})
		return entries, nil
	}
	// A batch that inserted nothing (acks, sweeps, expiries) gives the
	// dispatcher nothing to look at: waking it would only make it scan
	// again, and an Expire that wakes it would be proposed in a loop.
	if len(a.lows) > 0 || a.expiryLow != 0 {
		s.notify(s.shard, Change{Lows: a.lows, ExpiryLow: a.expiryLow})
	}
	return entries, nil
}

// Sync makes every applied batch durable.
func (s *StateMachine) Sync() error {
	return s.db.LogData(nil, pebble.Sync)
}

// AppliedQuery asks Lookup for the applied index.
type AppliedQuery struct{}

// HashQuery asks Lookup for StateHash.
type HashQuery struct{}

// Lookup answers AppliedQuery and HashQuery.
func (s *StateMachine) Lookup(q interface{}) (interface{}, error) {
	switch q.(type) {
	case AppliedQuery:
		return s.applied.Load(), nil
	case HashQuery:
		return StateHash(s.db, s.shard)
	}
	return nil, fmt.Errorf("fsm: unknown query %T", q)
}

// PrepareSnapshot pins the current state.
func (s *StateMachine) PrepareSnapshot() (interface{}, error) {
	return s.db.NewSnapshot(), nil
}

// SaveSnapshot streams the format header (keys.FormatVersion) and the
// shard's key range as length-prefixed pairs.
func (s *StateMachine) SaveSnapshot(ctx interface{}, w io.Writer, done <-chan struct{}) error {
	snap, ok := ctx.(*pebble.Snapshot)
	if !ok {
		return fmt.Errorf("fsm: snapshot context %T", ctx)
	}
	defer snap.Close()
	if _, err := w.Write(appendSnapshotHeader(nil)); err != nil {
		return err
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(s.shard), UpperBound: keys.ShardEnd(s.shard)})
	if err != nil {
		return err
	}
	defer it.Close()
	var buf []byte
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if n++; n%4096 == 0 {
			select {
			case <-done:
				return sm.ErrSnapshotStopped
			default:
			}
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		buf = binary.AppendUvarint(buf[:0], uint64(len(it.Key())))
		buf = append(buf, it.Key()...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return it.Error()
}

// Close releases nothing: the DB belongs to the broker.
func (s *StateMachine) Close() error { return nil }
