package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

const testShard = 7

// handMade writes a DB with pebble.Open, as a broker of a release before the
// format version key did: an applied index, a body and a copy, and, if
// version is non-zero, the version key.
func handMade(t *testing.T, dir string, version uint32) {
	t.Helper()
	db, err := pebble.Open(dir, quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	id := bytes.Repeat([]byte{1}, keys.IDBytes)
	body, err := proto.Marshal(&fsmpb.StoredMessage{Topic: "orders", Payload: []byte("p"), DueAtMs: 1000, GroupsPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := proto.Marshal(&fsmpb.CopyState{Topic: "orders", VisibleAtMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for k, v := range map[string][]byte{
		string(keys.Applied(testShard)):                    binary.BigEndian.AppendUint64(nil, 42),
		string(keys.Message(testShard, id)):                body,
		string(keys.Copy(testShard, id, "default")):        cp,
		string(keys.Group(testShard, "orders", "default")): nil,
	} {
		if err := b.Set([]byte(k), v, nil); err != nil {
			t.Fatal(err)
		}
	}
	if version != 0 {
		if err := b.Set(keys.Format(), binary.BigEndian.AppendUint32(nil, version), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// quiet keeps Pebble's informational lines out of the test log.
func quiet(t *testing.T) *pebble.Options {
	return &pebble.Options{Logger: pebbleLogger{zaptest.NewLogger(t)}}
}

func formatOf(t *testing.T, db *pebble.DB) uint32 {
	t.Helper()
	v, ok, err := readFormat(db)
	if err != nil || !ok {
		t.Fatalf("readFormat() = %d, %v, %v; want a version", v, ok, err)
	}
	return v
}

func TestOpenMarksNewDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	db, err := Open(Config{Dir: dir}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := formatOf(t, db); got != keys.FormatVersion {
		t.Fatalf("format of a new data dir = %d, want %d", got, keys.FormatVersion)
	}
}

// A data dir made before the version key is format 1: Open marks it,
// migrates it to the current format, and every shard reads the same state.
func TestOpenMarksDataDirBeforeVersionKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	handMade(t, dir, 0)
	db, err := pebble.Open(dir, quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	before, err := fsm.StateHash(db, testShard)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err = Open(Config{Dir: dir}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("Open(data dir before the version key) = %v", err)
	}
	defer db.Close()
	if got := formatOf(t, db); got != keys.FormatVersion {
		t.Fatalf("format of a data dir made before the version key = %d, want %d", got, keys.FormatVersion)
	}
	after, err := fsm.StateHash(db, testShard)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("shard state changed by marking the format: %x, want %x", after, before)
	}
	applied, err := fsm.New(db, testShard, nil).Open(nil)
	if err != nil || applied != 42 {
		t.Fatalf("fsm Open() = %d, %v; want 42", applied, err)
	}
}

func TestOpenRefusesNewerFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	handMade(t, dir, keys.FormatVersion+1)
	_, err := Open(Config{Dir: dir}, zaptest.NewLogger(t))
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Found != keys.FormatVersion+1 || fe.Known != keys.FormatVersion {
		t.Fatalf("Open(newer format) = %v, want a FormatError found %d known %d", err, keys.FormatVersion+1, keys.FormatVersion)
	}
	if !strings.Contains(err.Error(), "upgrade the binary") || !strings.Contains(err.Error(), dir) {
		t.Errorf("refusal %q does not name the dir and say to upgrade the binary", err)
	}
	// The refused DB was closed: it opens again (Pebble holds a lock file).
	db, err := pebble.Open(dir, quiet(t))
	if err != nil {
		t.Fatalf("reopen after refusal: %v", err)
	}
	if v, _, _ := readFormat(db); v != keys.FormatVersion+1 {
		t.Errorf("refused data dir's format = %d, want it untouched (%d)", v, keys.FormatVersion+1)
	}
	db.Close()
}

func TestCheckFormatMigrates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	handMade(t, dir, 1)
	db, err := pebble.Open(dir, quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log := zaptest.NewLogger(t)

	// No step from 1: refused, nothing written.
	err = checkFormat(db, dir, 2, migrations[:1], log)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Found != 1 || fe.Known != 2 || !strings.Contains(err.Error(), "no migration") {
		t.Fatalf("checkFormat(1 → 2, no step) = %v, want a FormatError saying there is no migration", err)
	}

	// A failing step leaves the version where it was.
	boom := errors.New("boom")
	failing := []migration{{from: 1, name: "fails", run: func(*pebble.DB) error { return boom }}}
	if err := checkFormat(db, dir, 2, failing, log); !errors.Is(err, boom) {
		t.Fatalf("checkFormat(failing step) = %v, want %v", err, boom)
	}
	if got := formatOf(t, db); got != 1 {
		t.Fatalf("format after a failed step = %d, want 1", got)
	}

	// Steps run in order, each one's version written after it.
	var ran []string
	step := func(name string, want uint32) func(*pebble.DB) error {
		return func(db *pebble.DB) error {
			if got := formatOf(t, db); got != want {
				t.Errorf("step %s ran at format %d, want %d", name, got, want)
			}
			ran = append(ran, name)
			return db.Set([]byte("s-"+name), nil, pebble.Sync)
		}
	}
	steps := []migration{{from: 2, name: "two", run: step("two", 2)}, {from: 1, name: "one", run: step("one", 1)}}
	if err := checkFormat(db, dir, 3, steps, log); err != nil {
		t.Fatalf("checkFormat(1 → 3) = %v", err)
	}
	if got := formatOf(t, db); got != 3 || strings.Join(ran, ",") != "one,two" {
		t.Fatalf("after migrating 1 → 3: format %d, steps %v; want 3, [one two]", got, ran)
	}
	// At the current format nothing runs.
	ran = nil
	if err := checkFormat(db, dir, 3, steps, log); err != nil || len(ran) != 0 {
		t.Fatalf("checkFormat(3 → 3) = %v, ran %v; want nil, none", err, ran)
	}
}

// format1Dir writes, with pebble.Open, a data dir as a format-1 broker left
// it: one message of a one-group topic as three keys (a body, the group's
// copy record and its due entry), the group registered, its counters and
// the applied index.
func format1Dir(t *testing.T, dir string, id []byte) {
	t.Helper()
	db, err := pebble.Open(dir, quiet(t))
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]proto.Message{
		string(keys.Message(testShard, id)):                         &fsmpb.StoredMessage{Topic: "orders", Payload: []byte("p"), PublishedAtMs: 900, DueAtMs: 1000, GroupsPending: 1},
		string(keys.Copy(testShard, id, fsm.DefaultGroup)):          &fsmpb.CopyState{Topic: "orders", VisibleAtMs: 1000},
		string(keys.Counter(testShard, "orders", fsm.DefaultGroup)): &fsmpb.Counters{Pending: 1},
	}
	b := db.NewBatch()
	for k, m := range records {
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Set([]byte(k), v, nil); err != nil {
			t.Fatal(err)
		}
	}
	q := keys.Queue{Topic: "orders", Group: fsm.DefaultGroup}
	for k, v := range map[string][]byte{
		string(keys.Due(testShard, q, 1000, 0, id)):               keys.DueValue(0, false),
		string(keys.Group(testShard, "orders", fsm.DefaultGroup)): nil,
		string(keys.Applied(testShard)):                           binary.BigEndian.AppendUint64(nil, 42),
		string(keys.Format()):                                     binary.BigEndian.AppendUint32(nil, 1),
	} {
		if err := b.Set([]byte(k), v, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A format-1 data dir opens in format 2 as it is, and its message, whose
// copy is a record of its own, is leased and acked as before, leaving no
// key of it; a message published after the upgrade keeps its copy in its
// body.
func TestFormat1DataDirReadAfterUpgrade(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	id := bytes.Repeat([]byte{1}, keys.IDBytes)
	format1Dir(t, dir, id)
	db, err := Open(Config{Dir: dir}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("Open(format-1 data dir) = %v", err)
	}
	defer db.Close()
	if got := formatOf(t, db); got != keys.FormatVersion {
		t.Fatalf("format after the upgrade = %d, want %d", got, keys.FormatVersion)
	}
	s := fsm.New(db, testShard, nil)
	if applied, err := s.Open(nil); err != nil || applied != 42 {
		t.Fatalf("fsm Open() = %d, %v; want 42", applied, err)
	}
	index := uint64(42)
	apply := func(c *fsmpb.Command) *fsmpb.Outcome {
		t.Helper()
		index++
		data, err := proto.Marshal(&fsmpb.Batch{Commands: []*fsmpb.Command{c}})
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.Update([]sm.Entry{{Index: index, Cmd: data}})
		if err != nil {
			t.Fatalf("Update() error = %v", err)
		}
		var outs fsmpb.Outcomes
		if err := proto.Unmarshal(es[0].Result.Data, &outs); err != nil {
			t.Fatal(err)
		}
		return outs.Outcomes[0]
	}
	if _, cs, err := fsm.ReadCopy(db, testShard, id, fsm.DefaultGroup); err != nil || cs == nil || cs.VisibleAtMs != 1000 {
		t.Fatalf("ReadCopy(format-1 message) = %v, %v; want its copy due at 1000", cs, err)
	}
	ref := &fsmpb.MessageRef{MessageId: id, Group: fsm.DefaultGroup}
	lease := &fsmpb.Lease{NowMs: 1000, Items: []*fsmpb.LeaseItem{{Ref: ref, VisibleAtMs: 1000, DeadlineMs: 5000}}}
	if got := apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: lease}}).Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("lease of the format-1 message = %v, want OK", got)
	}
	acked := &fsmpb.Ack{NowMs: 1001, Refs: []*fsmpb.MessageRef{{MessageId: id, Group: fsm.DefaultGroup, Attempt: 1}}}
	if got := apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: acked}}).Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack of the format-1 message = %v, want OK", got)
	}
	for name, k := range map[string][]byte{
		"body":      keys.Message(testShard, id),
		"copy":      keys.Copy(testShard, id, fsm.DefaultGroup),
		"due entry": keys.Due(testShard, keys.Queue{Topic: "orders", Group: fsm.DefaultGroup}, 5000, 0, id),
		"counters":  keys.Counter(testShard, "orders", fsm.DefaultGroup),
	} {
		if _, closer, err := db.Get(k); err == nil {
			closer.Close()
			t.Errorf("the acked format-1 message left its %s", name)
		}
	}

	pub := &fsmpb.Publish{NowMs: 2000, Messages: []*fsmpb.StoredMessage{{Topic: "orders", Payload: []byte("q"), PublishedAtMs: 2000, DueAtMs: 3000}}}
	newID := apply(&fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: pub}}).Published[0].MessageId
	if _, closer, err := db.Get(keys.Copy(testShard, newID, fsm.DefaultGroup)); err == nil {
		closer.Close()
		t.Fatalf("a message published after the upgrade has a copy record, want its copy in its body")
	}
	if body, cs, err := fsm.ReadCopy(db, testShard, newID, fsm.DefaultGroup); err != nil || cs == nil || body.InlineGroup != fsm.DefaultGroup || cs.VisibleAtMs != 3000 {
		t.Fatalf("ReadCopy(new message) = %v, %v, %v; want its inline copy due at 3000", body, cs, err)
	}
}
