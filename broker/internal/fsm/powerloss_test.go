package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/broker/internal/store"
)

// workload builds a seeded run of real commands against the state a
// replica holds: publishes (keyed IGNORE, REPLACE, DEBOUNCE, REJECT, with
// TTLs, retried request ids), leases that name the copy's attempt, due time
// and content version, acks, nacks, extends, cancels, reschedules, sweeps
// and expiries, the way the leader's loops would propose them.
type workload struct {
	t    testing.TB
	rng  *rand.Rand
	db   *pebble.DB // the replica the commands are built against
	now  int64
	ids  [][]byte // every message id published so far
	pubs []*fsmpb.Command
	reqs int
	// seen counts the effects the run had ("lease OK", "publish
	// KEY_OUTCOME_REPLACED", "change CHANGE_CODE_DONE", ...).
	seen map[string]int
}

func (w *workload) copyOf(id []byte) (*fsmpb.CopyState, bool) {
	w.t.Helper()
	_, cs, err := ReadCopy(w.db, shard, id, DefaultGroup)
	if err != nil {
		w.t.Fatalf("ReadCopy() error = %v", err)
	}
	return cs, cs != nil
}

func (w *workload) get(key []byte, m proto.Message) bool {
	w.t.Helper()
	v, closer, err := w.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		w.t.Fatalf("Get() error = %v", err)
	}
	defer closer.Close()
	if err := proto.Unmarshal(v, m); err != nil {
		w.t.Fatalf("decode: %v", err)
	}
	return true
}

func (w *workload) version(id []byte) uint64 {
	var body fsmpb.StoredMessage
	if !w.get(keys.Message(shard, id), &body) {
		return 0
	}
	return body.Version
}

// someID picks a published id, most often a recent one.
func (w *workload) someID() []byte {
	if len(w.ids) == 0 {
		return []byte("none")
	}
	n := min(len(w.ids), 20)
	if w.rng.IntN(4) == 0 {
		n = len(w.ids)
	}
	return w.ids[len(w.ids)-1-w.rng.IntN(n)]
}

// leased picks one of the leased copies among the recent messages.
func (w *workload) leased() ([]byte, *fsmpb.CopyState, bool) {
	type leasedCopy struct {
		id []byte
		cs *fsmpb.CopyState
	}
	var found []leasedCopy
	for _, id := range w.ids[max(0, len(w.ids)-40):] {
		if cs, ok := w.copyOf(id); ok && cs.Leased {
			found = append(found, leasedCopy{id, cs})
		}
	}
	if len(found) == 0 {
		return nil, nil, false
	}
	c := found[w.rng.IntN(len(found))]
	return c.id, c.cs, true
}

func (w *workload) ref(id []byte, attempt uint32) []*fsmpb.MessageRef {
	return []*fsmpb.MessageRef{{MessageId: id, Group: DefaultGroup, Attempt: attempt}}
}

func (w *workload) command() *fsmpb.Command {
	conflicts := []fsmpb.KeyConflict{fsmpb.KeyConflict_KEY_CONFLICT_IGNORE, fsmpb.KeyConflict_KEY_CONFLICT_REPLACE, fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE, fsmpb.KeyConflict_KEY_CONFLICT_REJECT}
	switch k := w.rng.IntN(20); {
	case k < 6: // publish
		if len(w.pubs) > 0 && w.rng.IntN(8) == 0 {
			return w.pubs[w.rng.IntN(len(w.pubs))] // a retry, same request id and contents
		}
		w.reqs++
		p := &fsmpb.Publish{NowMs: w.now}
		if w.rng.IntN(2) == 0 {
			p.RequestId = fmt.Sprintf("req-%d", w.reqs)
			p.Digest = []byte(p.RequestId)
		}
		for range 1 + w.rng.IntN(3) {
			m := &fsmpb.StoredMessage{Topic: "t", Payload: w.payload(), PublishedAtMs: w.now,
				DueAtMs: w.now + int64(w.rng.IntN(200)), DedupWindowMs: 300, Priority: int32(w.rng.IntN(3))}
			if w.rng.IntN(2) == 0 {
				m.Key = fmt.Sprintf("k%d", w.rng.IntN(6))
				m.OnConflict = conflicts[w.rng.IntN(len(conflicts))]
				if w.rng.IntN(2) == 0 {
					m.MaxWaitMs = 100
				}
			}
			if w.rng.IntN(4) == 0 {
				m.ExpiresAtMs = w.now + 50 + int64(w.rng.IntN(300))
			}
			p.Messages = append(p.Messages, m)
		}
		c := &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}}
		if p.RequestId != "" {
			w.pubs = append(w.pubs, c)
		}
		return c
	case k < 10: // lease what is due, or a lease that ran out
		id := w.someID()
		cs, ok := w.copyOf(id)
		if !ok || cs.VisibleAtMs > w.now {
			return w.sweep()
		}
		item := &fsmpb.LeaseItem{Ref: w.ref(id, cs.Attempt)[0], VisibleAtMs: cs.VisibleAtMs, DeadlineMs: w.now + 50 + int64(w.rng.IntN(200)), Version: w.version(id)}
		switch w.rng.IntN(10) {
		case 0:
			item.Remove = true
		case 1:
			item.DeadLetter = true
		}
		return &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: w.now, Items: []*fsmpb.LeaseItem{item}}}}
	case k < 15: // settle a delivery
		id, cs, ok := w.leased()
		if !ok {
			return w.sweep()
		}
		refs := w.ref(id, cs.Attempt)
		switch w.rng.IntN(4) {
		case 0:
			return &fsmpb.Command{Kind: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Refs: refs, VisibleAtMs: w.now + int64(w.rng.IntN(100)), Reason: "nack"}}}
		case 1:
			return &fsmpb.Command{Kind: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Refs: refs, DeadlineMs: w.now + 300}}}
		default:
			return &fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: refs, NowMs: w.now}}}
		}
	case k < 17: // cancel or reschedule, by id or key
		c := &fsmpb.Change{NowMs: w.now, Topic: "t", Cancel: w.rng.IntN(2) == 0, DedupWindowMs: 300}
		if w.rng.IntN(2) == 0 {
			c.Key = fmt.Sprintf("k%d", w.rng.IntN(6))
		} else {
			c.MessageId = w.someID()
		}
		if !c.Cancel {
			c.DueAtMs = w.now + int64(w.rng.IntN(300))
		}
		if w.rng.IntN(2) == 0 {
			// A few ids, so some changes are retries (same digest: the
			// first outcome) and some reuse an id for another change.
			c.RequestId = fmt.Sprintf("chg-%d", w.rng.IntN(8))
			c.Digest = fmt.Appendf(nil, "%v %s %x", c.Cancel, c.Key, c.MessageId)
		}
		return &fsmpb.Command{Kind: &fsmpb.Command_Change{Change: c}}
	case k < 18:
		return &fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: w.now, Limit: 8}}}
	default:
		return w.sweep()
	}
}

// payload is up to 3 KiB, so that batches and the WAL's blocks do not
// line up and a crash can keep part of what one Update wrote.
func (w *workload) payload() []byte {
	p := fmt.Appendf(nil, "p%d-", w.rng.IntN(1000))
	return append(p, bytes.Repeat([]byte{'x'}, w.rng.IntN(3<<10))...)
}

func (w *workload) sweep() *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: w.now - 300, NowMs: w.now, Limit: 4}}}
}

// entries builds n entries from index on, each a batch of a few commands,
// and advances the clock.
func (w *workload) entries(index uint64, n int) []sm.Entry {
	w.t.Helper()
	es := make([]sm.Entry, n)
	for i := range es {
		w.now += int64(1 + w.rng.IntN(40))
		b := &fsmpb.Batch{}
		for range 1 + w.rng.IntN(3) {
			b.Commands = append(b.Commands, w.command())
		}
		data, err := proto.Marshal(b)
		if err != nil {
			w.t.Fatalf("marshal: %v", err)
		}
		es[i] = sm.Entry{Index: index + uint64(i), Cmd: data}
	}
	return es
}

// learn remembers the ids an applied publish created and counts what the
// commands did.
func (w *workload) learn(applied []sm.Entry) {
	w.t.Helper()
	for _, e := range applied {
		var b fsmpb.Batch
		var outs fsmpb.Outcomes
		if err := proto.Unmarshal(e.Cmd, &b); err != nil {
			w.t.Fatalf("decode batch: %v", err)
		}
		if err := proto.Unmarshal(e.Result.Data, &outs); err != nil {
			w.t.Fatalf("decode outcome: %v", err)
		}
		for i, o := range outs.Outcomes {
			kind := strings.ToLower(strings.TrimPrefix(fmt.Sprintf("%T", b.Commands[i].Kind), "*fsmpb.Command_"))
			for _, c := range o.Codes {
				w.seen[kind+" "+strings.TrimPrefix(c.String(), "REF_CODE_")]++
			}
			if o.Change != nil {
				w.seen[kind+" "+o.Change.Code.String()]++
			}
			if o.Count > 0 {
				w.seen[kind+" count"]++
			}
			for _, p := range o.Published {
				w.seen[kind+" "+p.KeyOutcome.String()]++
				if !slices.ContainsFunc(w.ids, func(id []byte) bool { return bytes.Equal(id, p.MessageId) }) {
					w.ids = append(w.ids, p.MessageId)
				}
			}
		}
	}
}

func cloneEntries(es []sm.Entry) []sm.Entry {
	out := make([]sm.Entry, len(es))
	for i, e := range es {
		out[i] = sm.Entry{Index: e.Index, Cmd: e.Cmd}
	}
	return out
}

// walCrasher is a file system that calls crash in the middle of every
// write to a WAL file (*.log), its last byte not yet written (torn), and
// after it: a power cut while an Update commits. Pebble hands the WAL one
// or more commits per write, so a state machine that committed its state
// and its applied index (or counters) apart would be cut between the two.
type walCrasher struct {
	vfs.FS
	crash func(torn bool)
}

func (c walCrasher) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return c.wrap(name, f), err
}

func (c walCrasher) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname, cat)
	return c.wrap(newname, f), err
}

func (c walCrasher) wrap(name string, f vfs.File) vfs.File {
	if f == nil || !strings.HasSuffix(name, ".log") {
		return f
	}
	return crashingFile{File: f, crash: c.crash}
}

type crashingFile struct {
	vfs.File
	crash func(torn bool)
}

func (f crashingFile) Write(p []byte) (int, error) {
	if len(p) < 2 {
		n, err := f.File.Write(p)
		f.crash(false)
		return n, err
	}
	n, err := f.File.Write(p[:len(p)-1])
	if err != nil {
		return n, err
	}
	f.crash(true)
	m, err := f.File.Write(p[len(p)-1:])
	f.crash(false)
	return n + m, err
}

// crashPoint is a copy of the state DB's file system as power loss at one
// moment could leave it.
type crashPoint struct {
	fs     *vfs.MemFS
	synced uint64 // the index of the last Sync before the crash
	last   uint64 // the last index applied before the crash
}

// TestPowerLossKeepsAppliedIndexAndStateTogether applies a seeded run of
// commands with NoSync, as Dragonboat does, cutting the power at random
// moments (CrashClone keeps a random share of the unsynced writes). Every
// crashed copy, reopened with the production store options, must report an
// applied index whose state is exactly the state the replica had after
// that index, never earlier than the last Sync; replaying the log after it
// (in other batches than the first time) must answer the same outcomes and
// end in the state of the replica that never crashed.
func TestPowerLossKeepsAppliedIndexAndStateTogether(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { powerLossRun(t, seed, false) })
	}
}

// TestPowerLossInsideUpdate cuts the power after WAL writes too, while an
// Update commits, not only between Updates: a state machine that wrote its
// applied index apart from its state (or its counters apart from the rest)
// would be caught between the two commits.
func TestPowerLossInsideUpdate(t *testing.T) {
	for _, seed := range []uint64{4} { // one seed catches a split commit every run; more cost minutes under -race
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { powerLossRun(t, seed, true) })
	}
}

func powerLossRun(t *testing.T, seed uint64, insideUpdate bool) {
	zlog := zaptest.NewLogger(t)
	fs := vfs.NewCrashableMem()
	var (
		mu       sync.Mutex // guards the fields below, set by Pebble's WAL writer
		crashes  []crashPoint
		current  crashPoint // bounds of the Update in progress
		crashRng = rand.New(rand.NewPCG(seed, 14))
	)
	var dbFS vfs.FS = fs
	if insideUpdate {
		dbFS = walCrasher{FS: fs, crash: func(torn bool) {
			mu.Lock()
			defer mu.Unlock()
			if current.last == 0 {
				return
			}
			c := current
			// A torn write keeps everything written before it (the power
			// went in the middle of it); after a whole write, a random
			// share of the unsynced blocks survives.
			percent := 100
			if !torn {
				percent = crashRng.IntN(101)
			}
			c.fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: percent, RNG: crashRng})
			crashes = append(crashes, c)
		}}
	}
	db, err := store.Open(store.Config{Dir: "state", FS: dbFS}, zlog)
	if err != nil {
		t.Fatalf("store.Open() error = %v", err)
	}
	defer db.Close()
	s := New(db, shard, nil)
	if _, err := s.Open(nil); err != nil {
		t.Fatalf("Open() error = %v", err)
	}

	rng := rand.New(rand.NewPCG(seed, 8))
	w := &workload{t: t, rng: rng, db: db, now: 1000, seen: map[string]int{}}
	var entries []sm.Entry         // every entry applied, in order
	results := map[uint64][]byte{} // index → the entry's result
	hashAt := map[uint64][]byte{}  // applied index → the state hash then
	empty, err := StateHash(db, shard)
	if err != nil {
		t.Fatalf("StateHash() error = %v", err)
	}
	hashAt[0] = empty
	var synced uint64
	next := uint64(1)
	for range 120 {
		es := w.entries(next, 1+rng.IntN(4))
		mu.Lock()
		current = crashPoint{synced: synced, last: next + uint64(len(es)) - 1}
		mu.Unlock()
		applied, err := s.Update(cloneEntries(es))
		if err != nil {
			t.Fatalf("Update(%d..%d) error = %v", next, next+uint64(len(es))-1, err)
		}
		w.learn(applied)
		for _, e := range applied {
			results[e.Index] = e.Result.Data
		}
		entries = append(entries, es...)
		next += uint64(len(es))
		if hashAt[next-1], err = StateHash(db, shard); err != nil {
			t.Fatalf("StateHash() error = %v", err)
		}
		switch rng.IntN(12) {
		case 0:
			if err := s.Sync(); err != nil {
				t.Fatalf("Sync() error = %v", err)
			}
			synced = next - 1
		case 1:
			if err := db.Flush(); err != nil { // a memtable reaches the tables
				t.Fatalf("Flush() error = %v", err)
			}
		}
		if !insideUpdate && rng.IntN(3) == 0 {
			crashes = append(crashes, crashPoint{
				fs:     fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}),
				synced: synced, last: next - 1,
			})
		}
	}
	mu.Lock()
	current = crashPoint{}
	mu.Unlock()
	last := next - 1
	want := hashAt[last]
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync() error = %v", err)
	}
	crashes = append(crashes, crashPoint{fs: fs.CrashClone(vfs.CrashCloneCfg{}), synced: last, last: last})

	t.Logf("%d entries, %d messages, %d crashes; effects %v", len(entries), len(w.ids), len(crashes), w.seen)
	for _, effect := range []string{"lease OK", "ack OK", "nack OK", "extend OK", "publish KEY_OUTCOME_REPLACED", "publish KEY_OUTCOME_DEBOUNCED", "change CHANGE_CODE_DONE", "expire count"} {
		if w.seen[effect] == 0 {
			t.Errorf("the workload had no %q: it does not exercise what it claims", effect)
		}
	}
	reported := map[uint64]bool{}
	for n, c := range crashes {
		cdb, err := store.Open(store.Config{Dir: "state", FS: c.fs}, zlog)
		if err != nil {
			t.Fatalf("crash %d: store.Open() error = %v", n, err)
		}
		cs := New(cdb, shard, nil)
		idx, err := cs.Open(nil)
		if err != nil {
			t.Fatalf("crash %d: Open() error = %v", n, err)
		}
		reported[idx] = true
		if idx < c.synced || idx > c.last {
			t.Errorf("crash %d: Open() = %d, want between the last Sync's %d and the last applied %d", n, idx, c.synced, c.last)
		}
		got, err := StateHash(cdb, shard)
		if err != nil {
			t.Fatalf("crash %d: StateHash() error = %v", n, err)
		}
		if h, ok := hashAt[idx]; !ok || !bytes.Equal(got, h) {
			t.Errorf("crash %d: state at reported index %d differs from the replica's state after %d", n, idx, idx)
		}
		// Dragonboat replays the log after the reported index, batched
		// as it pleases.
		for i := int(idx); i < len(entries); {
			j := min(len(entries), i+1+rng.IntN(5))
			applied, err := cs.Update(cloneEntries(entries[i:j]))
			if err != nil {
				t.Fatalf("crash %d: replay Update() error = %v", n, err)
			}
			for _, e := range applied {
				if !bytes.Equal(e.Result.Data, results[e.Index]) {
					t.Errorf("crash %d: replayed entry %d answered differently than the first time", n, e.Index)
				}
			}
			i = j
		}
		if got, err = StateHash(cdb, shard); err != nil {
			t.Fatalf("crash %d: StateHash() error = %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("crash %d (reopened at %d): state after replay to %d differs from the replica that never crashed", n, idx, last)
		}
		if n == len(crashes)-1 && idx != last {
			t.Errorf("power loss after Sync: Open() = %d, want the last applied index %d", idx, last)
		}
		cdb.Close()
	}
	t.Logf("reported indexes: %d distinct", len(reported))
}
