package meta

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
)

// A backup run goes running → done or failed; one runs at a time; a
// retried start answers the run; captures are recorded only while it runs
// and only for the shards it names; finished runs are kept up to
// BackupRunsKept, oldest dropped first.
func TestBackupRuns(t *testing.T) {
	m := bootstrapped(t)
	idx := uint64(10)
	step := func(c *Command) uint64 {
		t.Helper()
		idx++
		return apply(t, m, idx, c).Value
	}
	start := func(id, kind, parent string) uint64 {
		return step(&Command{Op: OpStartBackup, NowMs: 1000, Backup: &BackupRun{ID: id, Kind: kind, Parent: parent, Dest: "file:///b"}})
	}
	for _, tc := range []struct {
		name string
		run  *BackupRun
	}{
		{"no kind", &BackupRun{ID: "x", Dest: "file:///b"}},
		{"incremental without a parent", &BackupRun{ID: "x", Kind: BackupIncremental, Dest: "file:///b"}},
		{"full with a parent", &BackupRun{ID: "x", Kind: BackupFull, Parent: "p", Dest: "file:///b"}},
		{"no destination", &BackupRun{ID: "x", Kind: BackupFull}},
	} {
		if got := step(&Command{Op: OpStartBackup, Backup: tc.run}); got != ResultInvalid {
			t.Errorf("start_backup(%s) = %d, want ResultInvalid", tc.name, got)
		}
	}
	if got := start("b1", BackupFull, ""); got != ResultOK {
		t.Fatalf("start_backup(b1) = %d, want ResultOK", got)
	}
	if got := start("b1", BackupFull, ""); got != ResultNoop {
		t.Errorf("start_backup(b1) again = %d, want ResultNoop", got)
	}
	if got := start("b2", BackupFull, ""); got != ResultBusy {
		t.Errorf("start_backup(b2) while b1 runs = %d, want ResultBusy", got)
	}
	run := state(t, m).RunningBackup()
	if run == nil || run.ID != "b1" || len(run.Shards) != 8 || run.StartedAtMs != 1000 {
		t.Fatalf("running backup = %+v, want b1 naming the 8 shards, started at 1000", run)
	}
	sc := &ShardCapture{Shard: run.Shards[0], BackupFile: BackupFile{Name: "f", Bytes: 10, SHA256: "ab"}, Index: 7, Kind: BackupFull}
	if got := step(&Command{Op: OpRecordBackup, Name: "b1", Capture: sc}); got != ResultOK {
		t.Fatalf("record_backup = %d, want ResultOK", got)
	}
	if got := step(&Command{Op: OpRecordBackup, Name: "b1", Capture: &ShardCapture{Shard: 99}}); got != ResultInvalid {
		t.Errorf("record_backup of a shard the run does not name = %d, want ResultInvalid", got)
	}
	if got := step(&Command{Op: OpRecordBackup, Name: "b1", BackupFile: &BackupFile{Name: "meta.sdb"}}); got != ResultOK {
		t.Fatalf("record_backup(catalog) = %d, want ResultOK", got)
	}
	step(&Command{Op: OpRecordBackup, Name: "b1", Error: "shard 101: unavailable"})
	r := state(t, m).BackupRun("b1")
	if r.Captures[sc.Shard].Index != 7 || r.Catalog == nil || r.Catalog.Name != "meta.sdb" || r.Error != "shard 101: unavailable" {
		t.Fatalf("run b1 = %+v, want its capture, catalog and note", r)
	}
	if got := step(&Command{Op: OpFinishBackup, Name: "b1", NowMs: 2000}); got != ResultOK {
		t.Fatalf("finish_backup(b1) = %d, want ResultOK", got)
	}
	if r := state(t, m).BackupRun("b1"); r.Status != BackupDone || r.FinishedAtMs != 2000 {
		t.Fatalf("b1 after finish = %s at %d, want done at 2000", r.Status, r.FinishedAtMs)
	}
	if got := step(&Command{Op: OpRecordBackup, Name: "b1", Capture: sc}); got != ResultNotFound {
		t.Errorf("record_backup of a finished run = %d, want ResultNotFound", got)
	}
	if got := start("b1", BackupFull, ""); got != ResultExists {
		t.Errorf("start_backup(b1) after it finished = %d, want ResultExists", got)
	}
	if got := start("b2", BackupIncremental, "b1"); got != ResultOK {
		t.Fatalf("start_backup(b2) = %d, want ResultOK", got)
	}
	step(&Command{Op: OpFinishBackup, Name: "b2", Error: "shard 100: dest unreachable"})
	if r := state(t, m).BackupRun(""); r.ID != "b2" || r.Status != BackupFailed || r.Error != "shard 100: dest unreachable" {
		t.Fatalf("newest run = %+v, want b2 failed with its error", r)
	}
	for i := range BackupRunsKept + 3 {
		id := fmt.Sprintf("c%02d", i)
		start(id, BackupFull, "")
		step(&Command{Op: OpFinishBackup, Name: id})
	}
	s := state(t, m)
	if len(s.Backups) != BackupRunsKept || s.Backups[0].ID != "c03" {
		t.Fatalf("kept %d runs from %s, want %d from c03", len(s.Backups), s.Backups[0].ID, BackupRunsKept)
	}
}

// The catalog holds the serving shards, the topics but one being deleted,
// and tokens and roles without receipt keys; restoring it into a cluster
// without topics installs them, keeps the cluster's own id, tokens and
// receipt keys, and a second restore is refused.
func TestCatalogRestore(t *testing.T) {
	src := bootstrapped(t)
	apply(t, src, 5, &Command{Op: OpCreateTopic, NowMs: 1, Topic: &Topic{Name: "orders", Partitions: 4, Groups: []string{"billing"}}})
	apply(t, src, 6, &Command{Op: OpCreateTopic, NowMs: 1, Topic: &Topic{Name: "gone"}})
	apply(t, src, 7, &Command{Op: OpAuthBootstrap, NowMs: 1, Token: &Token{Name: "admin", Hash: hash32("old-admin"), Role: "admin"}, ReceiptKey: &ReceiptKey{Secret: bytes.Repeat([]byte("k"), ReceiptKeyBytes)}})
	apply(t, src, 8, &Command{Op: OpCreateToken, NowMs: 1, Token: &Token{Name: "app", Hash: hash32("app"), Role: "admin"}})
	s := state(t, src)
	s.Topics["gone"].Deleting = 3
	cat := s.Catalog()
	if !slices.Equal(cat.TopicNames(), []string{"orders"}) || len(cat.Shards) != 8 || cat.Auth.ReceiptKeys != nil || len(cat.Auth.Tokens) != 2 {
		t.Fatalf("catalog = topics %v, %d shards, receipt keys %v, %d tokens; want orders, 8, none, 2", cat.TopicNames(), len(cat.Shards), cat.Auth.ReceiptKeys, len(cat.Auth.Tokens))
	}

	dst := bootstrapped(t)
	apply(t, dst, 5, &Command{Op: OpAuthBootstrap, NowMs: 1, Token: &Token{Name: "admin", Hash: hash32("new-admin"), Role: "admin"}, ReceiptKey: &ReceiptKey{Secret: bytes.Repeat([]byte("n"), ReceiptKeyBytes)}})
	before := state(t, dst)
	if r := apply(t, dst, 6, &Command{Op: OpRestoreCatalog, Name: "b7", Catalog: cat}); r.Value != ResultOK {
		t.Fatalf("restore_catalog = %d, want ResultOK", r.Value)
	}
	after := state(t, dst)
	if got := after.Topics["orders"]; got == nil || got.Partitions != 4 || !slices.Equal(got.Groups, []string{"billing", DefaultGroup}) {
		t.Fatalf("restored topic orders = %+v, want 4 partitions and groups billing and default", got)
	}
	if !bytes.Equal(after.Auth.Tokens["admin"].Hash, hash32("new-admin")) || after.Auth.Tokens["app"] == nil {
		t.Fatalf("tokens after restore: admin %q, app %v; want the new cluster's admin and the restored app", after.Auth.Tokens["admin"].Hash, after.Auth.Tokens["app"])
	}
	if after.Auth.ReceiptKeys[0].Secret[0] != 'n' || after.ClusterID != before.ClusterID || after.Version <= before.Version || after.Auth.Revision <= before.Auth.Revision {
		t.Fatalf("restore changed the receipt key, cluster id or did not bump versions: %+v", after.Auth)
	}
	if after.RestoredFrom != "b7" {
		t.Fatalf("restored_from = %q, want b7", after.RestoredFrom)
	}
	if r := apply(t, dst, 7, &Command{Op: OpRestoreCatalog, Name: "b8", Catalog: cat}); r.Value != ResultExists {
		t.Fatalf("second restore_catalog = %d, want ResultExists", r.Value)
	}
}

func hash32(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// A schedule is checked when set, its first run is due at once, and each
// scheduled run moves the next one on by every (never into a burst after
// a pause) and remembers the last full run, which decides the kind of the
// next.
func TestBackupSchedule(t *testing.T) {
	const minute = 60_000
	for _, tc := range []struct {
		name string
		sc   BackupSchedule
	}{
		{"no dest", BackupSchedule{EveryMs: minute}},
		{"every under a minute", BackupSchedule{Dest: "file:///b", EveryMs: 1000}},
		{"full every under every", BackupSchedule{Dest: "file:///b", EveryMs: 10 * minute, FullEveryMs: minute}},
		{"keep under full every", BackupSchedule{Dest: "file:///b", EveryMs: minute, FullEveryMs: 60 * minute, KeepMs: 30 * minute}},
	} {
		if tc.sc.Valid() == "" {
			t.Errorf("Valid(%s) = \"\", want a reason", tc.name)
		}
	}
	m := bootstrapped(t)
	sc := &BackupSchedule{Dest: "file:///b", EveryMs: 60 * minute, FullEveryMs: 24 * 60 * minute, KeepMs: 7 * 24 * 60 * minute}
	if r := apply(t, m, 5, &Command{Op: OpSetBackupSchedule, NowMs: 1_000_000, Schedule: &BackupSchedule{Dest: "file:///b", EveryMs: 1}}); r.Value != ResultInvalid {
		t.Fatalf("set_backup_schedule(every 1ms) = %d, want ResultInvalid", r.Value)
	}
	if r := apply(t, m, 6, &Command{Op: OpSetBackupSchedule, NowMs: 1_000_000, Schedule: sc}); r.Value != ResultOK {
		t.Fatalf("set_backup_schedule = %d, want ResultOK", r.Value)
	}
	got := state(t, m).BackupSchedule
	if got.NextAtMs != 1_000_000 || !got.FullDue(1_000_000) {
		t.Fatalf("schedule = %+v, want the first run due at once and full", got)
	}
	apply(t, m, 7, &Command{Op: OpStartBackup, NowMs: 1_000_000, Backup: &BackupRun{ID: "s1", Kind: BackupFull, Dest: "file:///b", Scheduled: true}})
	got = state(t, m).BackupSchedule
	if got.NextAtMs != 1_000_000+60*minute || got.LastFullAtMs != 1_000_000 || got.LastRun != "s1" || got.FullDue(1_000_000+60*minute) {
		t.Fatalf("schedule after s1 = %+v, want next in an hour, full at 1000000, and the next one incremental", got)
	}
	apply(t, m, 8, &Command{Op: OpFinishBackup, Name: "s1"})
	// Ten hours late (a cluster down): the next run is due at once, once.
	late := int64(1_000_000 + 600*minute)
	apply(t, m, 9, &Command{Op: OpStartBackup, NowMs: late, Backup: &BackupRun{ID: "s2", Kind: BackupIncremental, Parent: "s1", Dest: "file:///b", Scheduled: true}})
	if got := state(t, m).BackupSchedule; got.NextAtMs != late+1 || got.LastFullAtMs != 1_000_000 {
		t.Fatalf("schedule after a late run = %+v, want the next due just after it and the last full kept", got)
	}
	apply(t, m, 10, &Command{Op: OpSetBackupSchedule, NowMs: late})
	if got := state(t, m).BackupSchedule; got != nil {
		t.Fatalf("schedule after clearing = %+v, want none", got)
	}
}
