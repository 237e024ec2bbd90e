package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
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

// A data dir made before the version key is format 1: Open marks it and
// every shard reads the same state.
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
	if got := formatOf(t, db); got != 1 {
		t.Fatalf("format of a data dir made before the version key = %d, want 1", got)
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
	err = checkFormat(db, dir, 2, migrations, log)
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
