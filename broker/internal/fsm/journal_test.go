package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// records is a Sink that keeps what it is given as restore records.
type records []*fsmpb.RestoreRecord

func (r *records) Set(k, v []byte) error {
	*r = append(*r, &fsmpb.RestoreRecord{Key: bytes.Clone(k), Value: bytes.Clone(v)})
	return nil
}

func (r *records) Delete(k []byte) error {
	*r = append(*r, &fsmpb.RestoreRecord{Op: fsmpb.RestoreOp_RESTORE_OP_DELETE, Key: bytes.Clone(k)})
	return nil
}

func journalCmd(trimThrough uint64) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Journal{Journal: &fsmpb.Journal{TrimThrough: trimThrough}}}
}

func restoreCmd(id string, begin bool, seq uint64, recs records, end bool) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Restore{Restore: &fsmpb.Restore{RestoreId: id, Begin: begin, Seq: seq, Records: recs, End: end}}}
}

// capture captures r's shard since the given index.
func (r *replica) capture(since uint64) (records, Captured, error) {
	r.t.Helper()
	snap := r.s.db.NewSnapshot()
	defer snap.Close()
	var recs records
	c, err := Capture(snap, shard, since, func(uint64) (Sink, error) { return &recs, nil }, nil)
	return recs, c, err
}

// contents hashes the shard's keys and values but the bookkeeping: equal
// for a shard and its restored copy.
func (r *replica) contents() string {
	r.t.Helper()
	it, err := r.s.db.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(shard), UpperBound: keys.ShardEnd(shard)})
	if err != nil {
		r.t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	h := sha256.New()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if keys.Bookkeeping(it.Key()[keys.PrefixLen:]) {
			continue
		}
		n++
		fmt.Fprintf(h, "%x=%x;", it.Key(), it.Value())
	}
	return fmt.Sprintf("%d keys %x", n, h.Sum(nil))
}

// traffic publishes n messages of which it leases every third and acks
// every fifth.
func traffic(r *replica, from, n int) {
	for i := from; i < from+n; i++ {
		id := r.apply(publish(fmt.Sprintf("req-%d", i), int64(i), int64(i*10)))[0].Published[0].MessageId
		if i%3 == 0 || i%5 == 0 {
			r.apply(lease(id, 0, int64(i*10), int64(i*10+30_000)))
		}
		if i%5 == 0 {
			r.apply(ack(id, 1))
		}
	}
}

func TestFullAndIncrementalCaptureRestoreTheState(t *testing.T) {
	src := newReplica(t)
	traffic(src, 0, 60)
	on := src.apply(journalCmd(0))[0].Journal
	if on.GetSince() != src.index {
		t.Fatalf("journal on since %d, want the command's index %d", on.GetSince(), src.index)
	}
	full, c, err := src.capture(0)
	if err != nil {
		t.Fatalf("full capture: %v", err)
	}
	if c.Index != src.index || c.Messages == 0 {
		t.Fatalf("full capture = %+v, want index %d and messages", c, src.index)
	}
	atFull := src.contents()
	traffic(src, 60, 40) // between the capture and the trim: in both
	if got := src.apply(journalCmd(c.Index))[0].Journal.GetSince(); got != c.Index {
		t.Fatalf("journal since after trim = %d, want %d", got, c.Index)
	}
	traffic(src, 100, 30)
	src.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "other"}}})
	src.apply(&fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 50, NowMs: 50}}})

	incr, ci, err := src.capture(c.Index)
	if err != nil {
		t.Fatalf("incremental capture: %v", err)
	}
	if len(incr) == 0 || len(incr) >= len(full)+200 {
		t.Fatalf("incremental capture of %d records (full %d)", len(incr), len(full))
	}

	dst := newReplica(t)
	var resets int
	dst.s.notify = func(_ uint64, ch Change) {
		if ch.Reset {
			resets++
		}
	}
	for i, cmd := range []*fsmpb.Command{restoreCmd("r1", true, 0, nil, false), restoreCmd("r1", false, 1, full, false)} {
		if got := dst.apply(cmd)[0].Restore; got != fsmpb.RestoreCode_RESTORE_CODE_OK {
			t.Fatalf("restore step %d = %v", i, got)
		}
	}
	if got := dst.contents(); got != atFull {
		t.Fatalf("after the full backup: %s, want %s", got, atFull)
	}
	dst.apply(restoreCmd("r1", false, 2, incr, false))
	if got, want := dst.contents(), src.contents(); got != want {
		t.Fatalf("after the incremental: %s, want %s (captured at %d)", got, want, ci.Index)
	}
	if dst.leasedEntries() == 0 {
		t.Fatalf("the restored shard holds no lease: the traffic leased none")
	}
	end := restoreCmd("r1", false, 0, nil, true)
	end.GetRestore().NowMs = 99_000
	dst.apply(end)
	if n := dst.leasedEntries(); n != 0 {
		t.Fatalf("%d leases left after the restore's end, want none", n)
	}
	if resets != 1 {
		t.Fatalf("restore end reset the dispatcher %d times, want 1", resets)
	}
}

func TestIncrementalCaptureNeedsAJournalSinceThatIndex(t *testing.T) {
	r := newReplica(t)
	traffic(r, 0, 10)
	if _, _, err := r.capture(3); !errors.Is(err, ErrJournalGap) {
		t.Fatalf("capture with the journal off: %v, want ErrJournalGap", err)
	}
	since := r.apply(journalCmd(0))[0].Journal.GetSince()
	traffic(r, 10, 5)
	if _, _, err := r.capture(since - 1); !errors.Is(err, ErrJournalGap) {
		t.Fatalf("capture since an index before the journal's: %v, want ErrJournalGap", err)
	}
	if _, _, err := r.capture(r.index + 1); !errors.Is(err, ErrJournalGap) {
		t.Fatalf("capture since an index past the applied one: %v, want ErrJournalGap", err)
	}
	// Since an index after the journal's (a backup whose trim was lost):
	// the changes after that index only.
	mid := r.index
	traffic(r, 15, 1)
	later, _, err := r.capture(mid)
	if err != nil {
		t.Fatalf("capture since a later index: %v", err)
	}
	all, _, _ := r.capture(since)
	if len(later) == 0 || len(later) >= len(all) {
		t.Fatalf("capture since %d has %d records, since %d has %d: want fewer, not none", mid, len(later), since, len(all))
	}
	if _, _, err := r.capture(since); err != nil {
		t.Fatalf("capture since the journal's index: %v", err)
	}
	// A trim at an index the journal does not cover changes nothing.
	if got := r.apply(journalCmd(since - 1))[0].Journal.GetSince(); got != since {
		t.Fatalf("since after a trim below it = %d, want %d", got, since)
	}
}

func TestTrimDropsTheJournalUpToTheIndex(t *testing.T) {
	r := newReplica(t)
	r.apply(journalCmd(0))
	traffic(r, 0, 20)
	at := r.index
	traffic(r, 20, 5)
	before := r.countPrefix(keys.JournalPrefix(shard))
	r.apply(journalCmd(at))
	after := r.countPrefix(keys.JournalPrefix(shard))
	if after == 0 || after >= before {
		t.Fatalf("journal entries %d before the trim, %d after: want fewer, not none", before, after)
	}
	incr, _, err := r.capture(at)
	if err != nil {
		t.Fatalf("capture after trim: %v", err)
	}
	if len(incr) == 0 {
		t.Fatalf("capture after trim is empty; the 5 publishes after %d are missing", at)
	}
}

func TestJournalPastItsCapTurnsOff(t *testing.T) {
	r := newReplica(t)
	r.s.journalCap = 20
	r.apply(journalCmd(0))
	traffic(r, 0, 20)
	if n := r.countPrefix(keys.JournalPrefix(shard)); n != 0 {
		t.Fatalf("%d journal entries after the overflow, want 0", n)
	}
	st, err := loadJournal(r.s.db, shard)
	if err != nil || st != nil {
		t.Fatalf("journal state after overflow = %v, %v; want off", st, err)
	}
	if _, _, err := r.capture(1); !errors.Is(err, ErrJournalGap) {
		t.Fatalf("incremental after overflow: %v, want ErrJournalGap", err)
	}
	// The journal state survives a reopen.
	if _, err := r.s.Open(nil); err != nil || r.s.journal != nil {
		t.Fatalf("reopen: journal %v, err %v", r.s.journal, err)
	}
}

func TestRestoreRefusals(t *testing.T) {
	r := newReplica(t)
	traffic(r, 0, 3)
	if got := r.apply(restoreCmd("r1", true, 0, nil, false))[0].Restore; got != fsmpb.RestoreCode_RESTORE_CODE_NOT_EMPTY {
		t.Fatalf("begin into a shard with messages = %v, want NOT_EMPTY", got)
	}

	e := newReplica(t)
	step := func(cmd *fsmpb.Command, want fsmpb.RestoreCode) {
		t.Helper()
		if got := e.apply(cmd)[0].Restore; got != want {
			t.Fatalf("restore step = %v, want %v", got, want)
		}
	}
	one := records{{Key: []byte("gt\x00default")}}
	step(restoreCmd("r1", false, 1, one, false), fsmpb.RestoreCode_RESTORE_CODE_OTHER_RESTORE) // no begin
	step(restoreCmd("r0", true, 0, nil, false), fsmpb.RestoreCode_RESTORE_CODE_OK)
	step(restoreCmd("r1", true, 0, nil, false), fsmpb.RestoreCode_RESTORE_CODE_OK) // takes over: r0 wrote nothing
	step(restoreCmd("r0", false, 1, one, false), fsmpb.RestoreCode_RESTORE_CODE_OTHER_RESTORE)
	step(restoreCmd("r1", false, 2, one, false), fsmpb.RestoreCode_RESTORE_CODE_OUT_OF_ORDER)
	applied := keys.Applied(shard)[keys.PrefixLen:]
	step(restoreCmd("r1", false, 1, records{{Key: []byte("gt\x00x")}, {Key: applied, Value: []byte{9}}}, false), fsmpb.RestoreCode_RESTORE_CODE_BAD_RECORD)
	if e.has(keys.Group(shard, "t", "x")) {
		t.Fatalf("a refused chunk wrote its first record")
	}
	step(restoreCmd("r1", false, 1, one, false), fsmpb.RestoreCode_RESTORE_CODE_OK)
	step(restoreCmd("r2", true, 0, nil, false), fsmpb.RestoreCode_RESTORE_CODE_OTHER_RESTORE) // r1 wrote a chunk
	before := e.contents()
	step(restoreCmd("r1", false, 1, records{{Key: []byte("gt\x00again")}}, false), fsmpb.RestoreCode_RESTORE_CODE_OK) // a retry
	if e.contents() != before {
		t.Fatalf("a chunk proposed again was written again")
	}
	step(restoreCmd("r1", false, 0, nil, true), fsmpb.RestoreCode_RESTORE_CODE_OK)
	step(restoreCmd("r1", true, 0, nil, false), fsmpb.RestoreCode_RESTORE_CODE_OK) // resumed coordinator
	step(restoreCmd("r2", true, 0, nil, false), fsmpb.RestoreCode_RESTORE_CODE_NOT_EMPTY)
	if !e.has(keys.Group(shard, "t", DefaultGroup)) {
		t.Fatalf("the restored group is missing")
	}
}

// leasedEntries counts the due-index entries that are lease deadlines.
func (r *replica) leasedEntries() int {
	r.t.Helper()
	prefix := keys.DuePrefix(shard)
	it, err := r.s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		r.t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		if _, leased, err := keys.ParseDueValue(it.Value()); err == nil && leased {
			n++
		}
	}
	return n
}

// Replicas group the same entries into Update runs differently; with the
// journal on, their states (journal included) must still hash equal.
func TestJournalIsTheSameWhateverTheRuns(t *testing.T) {
	var entries []sm.Entry
	add := func(cmds ...*fsmpb.Command) {
		data, err := proto.Marshal(&fsmpb.Batch{Commands: cmds})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, sm.Entry{Index: uint64(len(entries) + 1), Cmd: data})
	}
	add(publish("r0", 1, 10))
	add(journalCmd(0)) // on mid-run
	for i := 1; i < 12; i++ {
		add(publish(fmt.Sprintf("r%d", i), int64(i), int64(i*10)))
	}
	one, each := newReplica(t), newReplica(t)
	if _, err := one.s.Update(slices.Clone(entries)); err != nil {
		t.Fatalf("Update(all) = %v", err)
	}
	for i := range entries {
		if _, err := each.s.Update([]sm.Entry{entries[i]}); err != nil {
			t.Fatalf("Update(%d) = %v", i, err)
		}
	}
	if one.countPrefix(keys.JournalPrefix(shard)) == 0 {
		t.Fatalf("no journal entries: the journal did not turn on")
	}
	if !bytes.Equal(one.hash(), each.hash()) {
		t.Fatalf("the same entries in one run and one at a time hash differently")
	}
}
