package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// The change journal makes incremental backups cost what changed, not what
// is stored. While it is on, every Raft entry that writes or deletes keys
// also writes one journal entry per key it touched, named by the entry's
// index (keys.Journal); a key touched by several entries has several.
// The journal is shard state, hashed and snapshotted like the rest, so it
// is named per entry: replicas group entries into Update runs differently
// (a counter, written once per run, is journaled by each entry that
// changes it). A backup captures a Pebble snapshot; an incremental one reads
// the journal entries in it and writes each named key's value as of the
// snapshot, or its deletion. Once the backup is kept, a Journal command
// trims the entries at or before the index it captured, in one range
// deletion, and the journal covers the changes after that index: the next
// incremental builds on it.
//
// The journal is off until the first backup turns it on and costs nothing
// then. It turns itself off past maxJournalKeys entries since its last
// trim (a shard nobody backs up any more, or backs up rarely under heavy
// traffic): the entries are dropped and the next backup of the shard is
// full.

// maxJournalKeys caps the journal entries written since the last trim
// (StateMachine.journalCap).
const maxJournalKeys = 50_000_000

// touch notes that the batch wrote or deleted key, for the journal.
func (a *applier) touch(key []byte) {
	if a.journal != nil {
		a.touched[string(key)] = struct{}{}
	}
}

// set writes key in the batch (and the journal, when on).
func (a *applier) set(key, value []byte) error {
	a.touch(key)
	return a.b.Set(key, value, nil)
}

// del deletes key in the batch (and notes it in the journal, when on).
func (a *applier) del(key []byte) error {
	a.touch(key)
	return a.b.Delete(key, nil)
}

// journalCmd applies a Journal command (fsmpb.Journal).
func (a *applier) journalCmd(j *fsmpb.Journal) (*fsmpb.Outcome, error) {
	st := &fsmpb.JournalState{}
	if a.journal != nil {
		st = proto.Clone(a.journal).(*fsmpb.JournalState)
	}
	switch {
	case j.TrimThrough == 0:
		if st.Since == 0 {
			st = &fsmpb.JournalState{Since: a.index}
		}
	case st.Since != 0 && j.TrimThrough > st.Since && j.TrimThrough < a.index:
		prefix := keys.JournalPrefix(a.shard)
		if err := a.b.DeleteRange(prefix, keys.JournalThrough(a.shard, j.TrimThrough), nil); err != nil {
			return nil, err
		}
		st.Since, st.Keys = j.TrimThrough, 0
	}
	if err := a.setJournal(st); err != nil {
		return nil, err
	}
	return &fsmpb.Outcome{Journal: proto.Clone(st).(*fsmpb.JournalState)}, nil
}

// setJournal stores st as the journal's state and switches the applier's
// journaling to match.
func (a *applier) setJournal(st *fsmpb.JournalState) error {
	v, err := proto.Marshal(st)
	if err != nil {
		return err
	}
	if err := a.b.Set(keys.JournalState(a.shard), v, nil); err != nil {
		return err
	}
	if st.Since == 0 {
		a.journal = nil
		return nil
	}
	a.journal = st
	if a.touched == nil {
		a.touched = map[string]struct{}{}
	}
	return nil
}

// flushJournal writes the journal entries of the keys the entry at index
// touched, and turns the journal off past its cap.
func (a *applier) flushJournal(index uint64) error {
	if a.journal == nil || len(a.touched) == 0 {
		return nil
	}
	for k := range a.touched {
		if err := a.b.Set(keys.Journal(a.shard, index, []byte(k)), nil, nil); err != nil {
			return err
		}
	}
	n := len(a.touched)
	clear(a.touched)
	st := proto.Clone(a.journal).(*fsmpb.JournalState)
	st.Keys += uint64(n)
	if st.Keys > a.journalCap {
		prefix := keys.JournalPrefix(a.shard)
		if err := a.b.DeleteRange(prefix, keys.PrefixEnd(prefix), nil); err != nil {
			return err
		}
		st = &fsmpb.JournalState{Overflowed: true}
	}
	return a.setJournal(st)
}

// loadJournal reads the journal's state from r; nil when it is off.
func loadJournal(r pebble.Reader, shard uint64) (*fsmpb.JournalState, error) {
	st := &fsmpb.JournalState{}
	if _, err := getRecord(r, keys.JournalState(shard), st); err != nil {
		return nil, fmt.Errorf("fsm: read journal state: %w", err)
	}
	if st.Since == 0 {
		return nil, nil
	}
	return st, nil
}

// Sink receives the records of a capture; keys are relative to the shard
// prefix and valid during the call only.
type Sink interface {
	Set(key, value []byte) error
	Delete(key []byte) error
}

// Captured describes a capture.
type Captured struct {
	// Index is the Raft index the captured state is at.
	Index uint64
	// Since is the index an incremental capture builds on; 0 for a full one.
	Since uint64
	// Records and Messages count what the sink got: records, and message
	// bodies written.
	Records, Messages uint64
}

// ErrJournalGap refuses an incremental capture the journal does not cover:
// it is off, or covers changes after another index than the one asked.
var ErrJournalGap = errors.New("fsm: the change journal does not cover the changes since that index")

// JournalSince answers the index after which the shard's journal in r
// covers every change; 0 when it is off.
func JournalSince(r pebble.Reader, shard uint64) (uint64, error) {
	st, err := loadJournal(r, shard)
	if err != nil || st == nil {
		return 0, err
	}
	return st.Since, nil
}

// Capture writes shard's state as snap holds it to the sink open returns,
// leaving out the replica's bookkeeping (keys.Bookkeeping). With since 0 it
// writes every key; otherwise the keys the journal names for the batches
// after since (their values, or deletions): the journal must be on since
// an index at or before since (else ErrJournalGap, before open is called;
// a journal not trimmed after the last backup still serves). open is told the captured index
// first. done, when closed, stops the capture.
func Capture(snap *pebble.Snapshot, shard, since uint64, open func(index uint64) (Sink, error), done <-chan struct{}) (Captured, error) {
	index, err := readApplied(snap, shard)
	if err != nil {
		return Captured{}, err
	}
	if since != 0 {
		from, err := JournalSince(snap, shard)
		if err != nil {
			return Captured{}, err
		}
		if from == 0 || from > since || since > index {
			return Captured{}, fmt.Errorf("%w: shard %d journals the changes after index %d (0: off), not %d (applied %d)", ErrJournalGap, shard, from, since, index)
		}
	}
	sink, err := open(index)
	if err != nil {
		return Captured{}, err
	}
	c := Captured{Index: index, Since: since}
	if since == 0 {
		err = captureAll(snap, shard, sink, &c, done)
	} else {
		err = captureJournal(snap, shard, since, sink, &c, done)
	}
	return c, err
}

func captureAll(snap *pebble.Snapshot, shard uint64, sink Sink, c *Captured, done <-chan struct{}) error {
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(shard), UpperBound: keys.ShardEnd(shard)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		rel := it.Key()[keys.PrefixLen:]
		if keys.Bookkeeping(rel) {
			continue
		}
		if err := stopped(c.Records, done); err != nil {
			return errors.Join(err, it.Close())
		}
		v, err := it.ValueAndErr()
		if err == nil {
			err = sink.Set(rel, v)
		}
		if err != nil {
			return errors.Join(err, it.Close())
		}
		c.Records++
		if keys.IsMessage(rel) {
			c.Messages++
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// captureJournal writes each key the journal names for the entries after
// index since once, as it is in snap.
func captureJournal(snap *pebble.Snapshot, shard, since uint64, sink Sink, c *Captured, done <-chan struct{}) error {
	prefix := keys.JournalPrefix(shard)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: keys.JournalThrough(shard, since), UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	seen := map[string]struct{}{}
	base := keys.ShardPrefix(shard)
	var key []byte
	for valid := it.First(); valid; valid = it.Next() {
		rel := keys.JournaledKey(it.Key())
		if _, ok := seen[string(rel)]; ok || keys.Bookkeeping(rel) {
			continue
		}
		seen[string(rel)] = struct{}{}
		if err := stopped(c.Records, done); err != nil {
			return errors.Join(err, it.Close())
		}
		key = append(append(key[:0], base...), rel...)
		if err := captureKey(snap, key, rel, sink, c); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Error(), it.Close())
}

func captureKey(snap *pebble.Snapshot, key, rel []byte, sink Sink, c *Captured) error {
	c.Records++
	v, closer, err := snap.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return sink.Delete(rel)
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	if keys.IsMessage(rel) {
		c.Messages++
	}
	return sink.Set(rel, v)
}

// errCaptureStopped ends a capture whose done channel closed.
var errCaptureStopped = errors.New("fsm: capture stopped")

func stopped(n uint64, done <-chan struct{}) error {
	if n%4096 != 0 {
		return nil
	}
	select {
	case <-done:
		return errCaptureStopped
	default:
		return nil
	}
}

// readApplied reads the applied index of shard in r.
func readApplied(r pebble.Reader, shard uint64) (uint64, error) {
	v, closer, err := r.Get(keys.Applied(shard))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fsm: read applied index: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("fsm: applied index of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
