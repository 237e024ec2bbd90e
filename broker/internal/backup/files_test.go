package backup

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sundialmq/sundial/broker/internal/backup/format"
	"github.com/sundialmq/sundial/broker/internal/backup/store"
	"github.com/sundialmq/sundial/meta"
)

func TestCatalogFileRoundTrip(t *testing.T) {
	st, err := store.Open("file://"+t.TempDir(), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cat := &meta.Catalog{ClusterID: "c1", Shards: []meta.EventShardID{100, 101},
		Topics: map[string]*meta.Topic{"orders": {Name: "orders", Partitions: 4, Groups: []string{"default", "billing"}}}}
	f, err := WriteCatalog(t.Context(), st, "20261206T043000Z-1a2b3c", cat, 1000)
	if err != nil {
		t.Fatalf("WriteCatalog() = %v", err)
	}
	if f.Name != format.MetaFileName("20261206T043000Z-1a2b3c") || f.Bytes == 0 || len(f.SHA256) != 64 {
		t.Fatalf("WriteCatalog() = %+v, want the meta file with its size and SHA-256", f)
	}
	if err := format.VerifyFile(t.Context(), st, format.FileEntry{Name: f.Name, Bytes: f.Bytes, SHA256: f.SHA256}); err != nil {
		t.Fatalf("VerifyFile(catalog) = %v", err)
	}
	got, err := ReadCatalog(t.Context(), st, f.Name)
	if err != nil || !reflect.DeepEqual(got, cat) {
		t.Fatalf("ReadCatalog() = %+v, %v; want %+v", got, err, cat)
	}
}

func TestManifestOfARun(t *testing.T) {
	run := &meta.BackupRun{ID: "20261206T043000Z-1a2b3c", Kind: meta.BackupIncremental, Parent: "20261206T033000Z-0a0b0c", StartedAtMs: 5,
		Shards:  []meta.EventShardID{100, 101},
		Catalog: &meta.BackupFile{Name: "backups/x/meta.sdb", Bytes: 10, SHA256: "aa"},
		Captures: map[meta.EventShardID]*meta.ShardCapture{
			100: {Shard: 100, BackupFile: meta.BackupFile{Name: "s100", Bytes: 100}, Index: 9, Since: 4, Kind: meta.BackupIncremental, Messages: 3},
			101: {Shard: 101, BackupFile: meta.BackupFile{Name: "s101", Bytes: 200}, Index: 7, Kind: meta.BackupFull, Messages: 5},
		}}
	m, err := Manifest(run, "c1", 9)
	if err != nil {
		t.Fatalf("Manifest() = %v", err)
	}
	if m.Bytes != 310 || m.Messages != 8 || len(m.Shards) != 2 || m.Shards[1].Kind != meta.BackupFull || m.Parent != run.Parent || m.FinishedUnixMs != 9 {
		t.Fatalf("Manifest() = %+v, want both shards, 310 bytes, 8 messages, shard 101 full", m)
	}
	delete(run.Captures, 101)
	if _, err := Manifest(run, "c1", 9); err == nil {
		t.Fatalf("Manifest() of a run missing a shard's capture = nil error")
	}
}

// A restore goes only into a cluster without topics that serves the
// backup's shards.
func TestRestoreTarget(t *testing.T) {
	target := format.Manifest{Shards: []format.ShardEntry{{Shard: 101}, {Shard: 100}}}
	cluster := func(shards ...meta.EventShardID) *meta.State {
		st := meta.NewState()
		for _, id := range shards {
			st.Shards[id] = &meta.Shard{ID: id}
		}
		return st
	}
	withTopic := cluster(100, 101)
	withTopic.Topics["t"] = &meta.Topic{Name: "t"}
	starting := cluster(100, 101, 102)
	starting.Shards[102].State = meta.ShardStarting
	var mismatch *ShardsMismatchError
	for _, tc := range []struct {
		name  string
		st    *meta.State
		check func(error) bool
	}{
		{"the same shards", cluster(100, 101), func(err error) bool { return err == nil }},
		{"a starting shard is not served", starting, func(err error) bool { return err == nil }},
		{"topics", withTopic, func(err error) bool { return errors.Is(err, ErrClusterHoldsData) }},
		{"fewer shards", cluster(100), func(err error) bool { return errors.As(err, &mismatch) }},
		{"other shards", cluster(100, 102), func(err error) bool { return errors.As(err, &mismatch) }},
	} {
		if err := checkTarget(tc.st, target); !tc.check(err) {
			t.Errorf("checkTarget(%s) = %v", tc.name, err)
		}
	}
}
