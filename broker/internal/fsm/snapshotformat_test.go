package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// savedSnapshot is the whole snapshot stream of r's shard.
func savedSnapshot(t *testing.T, r *replica) []byte {
	t.Helper()
	ctx, err := r.s.PrepareSnapshot()
	if err != nil {
		t.Fatalf("PrepareSnapshot() error = %v", err)
	}
	var buf bytes.Buffer
	if err := r.s.SaveSnapshot(ctx, &buf, nil); err != nil {
		t.Fatalf("SaveSnapshot() error = %v", err)
	}
	return buf.Bytes()
}

// snapshotHeader is the head of a snapshot stream in format v: an empty key
// (no shard key is empty) whose value is the version.
func snapshotHeader(v uint32) []byte {
	return []byte{0, 4, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

func TestSnapshotCarriesFormatVersion(t *testing.T) {
	a := newReplica(t)
	for i := range 10 {
		a.apply(publish("", int64(i), int64(i*10)))
	}
	snap := savedSnapshot(t, a)
	if want := snapshotHeader(keys.FormatVersion); !bytes.HasPrefix(snap, want) {
		t.Fatalf("snapshot starts with % x, want the format header % x", snap[:min(len(snap), 8)], want)
	}

	// A snapshot of a broker from before the header (the pairs alone) is
	// format 1, which this broker reads as it is: it recovers the same
	// state. So does one whose header says format 1.
	for name, old := range map[string][]byte{
		"headerless": snap[len(snapshotHeader(keys.FormatVersion)):],
		"format 1":   append(snapshotHeader(1), snap[len(snapshotHeader(keys.FormatVersion)):]...),
	} {
		b := newReplica(t)
		if err := b.s.RecoverFromSnapshot(bytes.NewReader(old), nil); err != nil {
			t.Fatalf("RecoverFromSnapshot(%s) error = %v", name, err)
		}
		if !bytes.Equal(a.hash(), b.hash()) {
			t.Fatalf("state recovered from a %s snapshot differs from the source", name)
		}
	}
	// So does an empty shard's headerless snapshot: an empty stream.
	e := newReplica(t)
	e.apply(publish("stale", 1, 1))
	if err := e.s.RecoverFromSnapshot(bytes.NewReader(nil), nil); err != nil {
		t.Fatalf("RecoverFromSnapshot(empty) error = %v", err)
	}
	if n := e.keyCount(); n != 0 {
		t.Fatalf("keys after recovering an empty snapshot = %d, want 0", n)
	}
}

func TestSnapshotOfNewerFormatIsRefused(t *testing.T) {
	a := newReplica(t)
	a.apply(publish("", 1, 10))
	snap := savedSnapshot(t, a)
	newer := append(snapshotHeader(keys.FormatVersion+1), snap[len(snapshotHeader(keys.FormatVersion)):]...)

	b := newReplica(t)
	b.apply(publish("kept", 1, 1))
	before := b.hash()
	err := b.s.RecoverFromSnapshot(bytes.NewReader(newer), nil)
	var fe *SnapshotFormatError
	if !errors.As(err, &fe) || fe.Found != keys.FormatVersion+1 || fe.Known != keys.FormatVersion {
		t.Fatalf("RecoverFromSnapshot(format %d) = %v, want a SnapshotFormatError", keys.FormatVersion+1, err)
	}
	if !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("refusal %q does not say to upgrade the broker", err)
	}
	if !bytes.Equal(b.hash(), before) || hasRecoveryMarker(t, b.s.db, shard) {
		t.Fatalf("a refused snapshot changed the shard's state")
	}

	// A header whose value is not a version is refused too.
	bad := append([]byte{0, 2, 0, 1}, snap[len(snapshotHeader(keys.FormatVersion)):]...)
	if err := b.s.RecoverFromSnapshot(bytes.NewReader(bad), nil); err == nil {
		t.Fatalf("RecoverFromSnapshot(2-byte version) = nil, want an error")
	}
	if !bytes.Equal(b.hash(), before) {
		t.Fatalf("a malformed header changed the shard's state")
	}
}

// FuzzSnapshotHeader: any stream head either yields a version or an error,
// never a panic; a header is consumed, a headerless stream is left whole.
func FuzzSnapshotHeader(f *testing.F) {
	f.Add(snapshotHeader(1))
	f.Add(append(snapshotHeader(2), 10, 's'))
	f.Add([]byte{10, 's', 0, 0})
	f.Add([]byte{0, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		br := byteReader(bytes.NewReader(b))
		v, err := readSnapshotFormat(br)
		if err != nil {
			return
		}
		rest := br.Buffered()
		if len(b) > 0 && b[0] == 0 {
			// At least the header's bytes (a length may be encoded longer).
			if used := len(b) - rest; used < len(snapshotHeader(v)) {
				t.Fatalf("readSnapshotFormat(% x) read %d bytes, want at least %d", b, used, len(snapshotHeader(v)))
			}
		} else if v != 1 || rest != len(b) {
			t.Fatalf("readSnapshotFormat(headerless % x) = %d leaving %d bytes, want 1 leaving %d", b, v, rest, len(b))
		}
	})
}
