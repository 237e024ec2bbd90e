package format

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/broker/internal/backup/store"
)

// dest opens a file store in a fresh directory and answers it with the
// directory.
func dest(t *testing.T) (store.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "dest")
	s, err := store.Open("file://"+dir, store.Config{})
	if err != nil {
		t.Fatalf("store.Open = %v", err)
	}
	return s, dir
}

func putBytes(ctx context.Context, t *testing.T, s store.Store, name string, b []byte) {
	t.Helper()
	if err := s.Put(ctx, name, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("Put(%s) = %v", name, err)
	}
}

// storeBackup writes a full backup id of shards 1 and 2 (records each)
// and the meta catalog to s, manifest last, and answers the manifest.
func storeBackup(ctx context.Context, t *testing.T, s store.Store, id string, records int) Manifest {
	t.Helper()
	m := Manifest{ID: id, Kind: KindFull, ClusterID: "c-1", ShardCount: 2, CreatedUnixMs: 1, FinishedUnixMs: 2}
	for shard := uint64(1); shard <= 2; shard++ {
		var recs []Record
		for i := range records {
			recs = append(recs, set(strings.Repeat("k", i+1), strings.Repeat("v", 100*i)))
		}
		h := Header{Kind: KindShard, BackupID: id, ClusterID: "c-1", Shard: shard, Index: 100 * shard}
		data, sum := write(t, h, recs)
		name := ShardFileName(id, shard)
		putBytes(ctx, t, s, name, data)
		m.Shards = append(m.Shards, ShardEntry{Shard: shard, Index: h.Index, Kind: KindFull,
			FileEntry: FileEntry{Name: name, Bytes: sum.Bytes, SHA256: sum.SHA256}, Records: int64(sum.Records)})
		m.Bytes += sum.Bytes
	}
	data, sum := write(t, Header{Kind: KindMeta, BackupID: id, ClusterID: "c-1"}, []Record{set("topic/orders", "{}")})
	putBytes(ctx, t, s, MetaFileName(id), data)
	m.Meta = FileEntry{Name: MetaFileName(id), Bytes: sum.Bytes, SHA256: sum.SHA256}
	m.Bytes += sum.Bytes
	b, err := MarshalManifest(m)
	if err != nil {
		t.Fatalf("MarshalManifest = %v", err)
	}
	putBytes(ctx, t, s, ManifestName(id), b)
	m.Format = ManifestFormat
	return m
}

func TestListManifests(t *testing.T) {
	ctx := context.Background()
	s, _ := dest(t)
	storeBackup(ctx, t, s, idB, 3)
	storeBackup(ctx, t, s, idA, 3)
	putBytes(ctx, t, s, ShardFileName(idC, 1), []byte("half a backup")) // no manifest: unfinished
	putBytes(ctx, t, s, "backups/not-an-id/MANIFEST.json", []byte("{}"))
	putBytes(ctx, t, s, "elsewhere/MANIFEST.json", []byte("{}"))

	ms, err := ListManifests(ctx, s)
	if err != nil || !slices.Equal(ids(ms), []string{idA, idB}) {
		t.Fatalf("ListManifests = %v, %v, want [%s %s]", ids(ms), err, idA, idB)
	}
	unfinished, err := Unfinished(ctx, s)
	if err != nil || !slices.Equal(unfinished, []string{idC}) {
		t.Fatalf("Unfinished = %v, %v, want [%s]", unfinished, err, idC)
	}

	// A manifest that cannot be read fails the listing, naming it.
	putBytes(ctx, t, s, ManifestName(idD), []byte(`{"format": 1, "id": "`+idD+`"`))
	if _, err := ListManifests(ctx, s); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), ManifestName(idD)) {
		t.Fatalf("ListManifests with a broken manifest = %v, want ErrCorrupt naming %s", err, ManifestName(idD))
	}
	// So does one naming another backup than its directory.
	b, err := MarshalManifest(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	putBytes(ctx, t, s, ManifestName(idD), b)
	if _, err := ListManifests(ctx, s); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "names backup "+idA) {
		t.Fatalf("ListManifests with a misplaced manifest = %v, want ErrCorrupt saying it names %s", err, idA)
	}
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	s, _ := dest(t)
	m := storeBackup(ctx, t, s, idA, 50)
	var calls [][2]int64
	if err := Verify(ctx, s, m, func(done, total int64) { calls = append(calls, [2]int64{done, total}) }); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	if len(calls) == 0 || calls[len(calls)-1] != [2]int64{m.Bytes, m.Bytes} {
		t.Fatalf("Verify progress = %v, want it to end at %d of %d", calls, m.Bytes, m.Bytes)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i][0] < calls[i-1][0] || calls[i][1] != m.Bytes {
			t.Fatalf("Verify progress = %v, want done to grow and total %d", calls, m.Bytes)
		}
	}
	if err := Verify(ctx, s, m, nil); err != nil {
		t.Fatalf("Verify(no progress) = %v", err)
	}
}

func TestVerifyFinds(t *testing.T) {
	ctx := context.Background()
	shard1 := ShardFileName(idA, 1)
	tests := []struct {
		name   string
		damage func(t *testing.T, s store.Store, dir string, m *Manifest)
		want   error
		says   []string
	}{
		{"truncated file", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			p := filepath.Join(dir, filepath.FromSlash(shard1))
			if err := os.Truncate(p, m.Shards[0].Bytes-10); err != nil {
				t.Fatal(err)
			}
		}, ErrTruncated, []string{shard1, "is truncated", "bytes"}},
		{"altered byte", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			p := filepath.Join(dir, filepath.FromSlash(shard1))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x20
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt, []string{shard1, "was altered"}},
		{"missing file", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			if err := s.Delete(ctx, MetaFileName(idA)); err != nil {
				t.Fatal(err)
			}
		}, store.ErrNotFound, []string{MetaFileName(idA), "missing"}},
		{"replaced by another valid file", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			data, _ := write(t, Header{Kind: KindShard, BackupID: idA, ClusterID: "c-1", Shard: 1, Index: 100}, []Record{set("a", "b")})
			putBytes(ctx, t, s, shard1, data)
		}, ErrCorrupt, []string{shard1, "was altered"}},
		{"manifest with another checksum", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			m.Shards[1].SHA256 = sumA
		}, ErrCorrupt, []string{ShardFileName(idA, 2), "SHA-256", sumA}},
		{"files swapped", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			m.Shards[0].FileEntry, m.Shards[1].FileEntry = m.Shards[1].FileEntry, m.Shards[0].FileEntry
		}, ErrCorrupt, []string{ShardFileName(idA, 2), "shard 2", "wants a shard capture (shard 1"}},
		{"record count", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			m.Shards[0].Records++
		}, ErrCorrupt, []string{shard1, "holds 50 records, the manifest says 51"}},
		{"meta from another backup", func(t *testing.T, s store.Store, dir string, m *Manifest) {
			m.Meta = storeBackup(ctx, t, s, idB, 1).Meta
		}, ErrCorrupt, []string{MetaFileName(idB), "of backup " + idB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := dest(t)
			m := storeBackup(ctx, t, s, idA, 50)
			tt.damage(t, s, dir, &m)
			err := Verify(ctx, s, m, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			for _, w := range tt.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Verify = %q, want it to say %q", err, w)
				}
			}
		})
	}
}

func TestVerifyFileCancelled(t *testing.T) {
	s, _ := dest(t)
	m := storeBackup(context.Background(), t, s, idA, 5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := VerifyFile(ctx, s, m.Shards[0].FileEntry); !errors.Is(err, context.Canceled) {
		t.Fatalf("VerifyFile(cancelled) = %v, want context.Canceled", err)
	}
}
