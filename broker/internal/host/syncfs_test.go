package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	pvfs "github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// fsyncCounts reads a host's (or test's) raft log sync counter and the
// sample count of its duration histogram from reg.
func fsyncCounts(t *testing.T, reg prometheus.Gatherer) (fsyncs, observed uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sundial_broker_raft_log_fsyncs_total":
			fsyncs = uint64(mf.GetMetric()[0].GetCounter().GetValue())
			found++
		case "sundial_broker_raft_log_fsync_duration_seconds":
			observed = mf.GetMetric()[0].GetHistogram().GetSampleCount()
			found++
		}
	}
	if found != 2 {
		t.Fatalf("registry serves %d of the 2 raft log fsync metrics", found)
	}
	return fsyncs, observed
}

// counter reads the counter name from reg.
func counter(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return uint64(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	t.Fatalf("registry serves no %s", name)
	return 0
}

func write(t *testing.T, f pvfs.File, p string) {
	t.Helper()
	if _, err := f.Write([]byte(p)); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, fs pvfs.FS, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Only the WAL files under a registered dir count their syncs; writes, reads
// and every other file are the inner FS's.
func TestWALSyncFSCountsWALSyncsUnderRegisteredDirs(t *testing.T) {
	mem := pvfs.NewMem()
	fs := newWALSyncFS(mem)
	reg := prometheus.NewRegistry()
	done, err := fs.register("/data/raft", newRaftLogMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/data/raft/host/1", "/data/raftx", "/other/raft"} {
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		syncs   uint64 // counted syncs after this file's two
		counted bool
	}{
		{"/data/raft/host/1/000001.log", 2, true},
		{"/data/raft/host/1/MANIFEST-000001", 2, false},
		{"/data/raft/host/1/000002.sst", 2, false},
		{"/data/raftx/000003.log", 2, false}, // not under /data/raft
		{"/other/raft/000004.log", 2, false},
		{"/data/raft/host/1/000005.log", 4, true},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.name), func(t *testing.T) {
			f, err := fs.Create(c.name)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.(*syncCountingFile); ok != c.counted {
				t.Fatalf("Create(%s) counts syncs = %v, want %v", c.name, ok, c.counted)
			}
			write(t, f, "entry-1")
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			write(t, f, "entry-2")
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, fs, c.name); got != "entry-1entry-2" {
				t.Fatalf("%s reads %q, want %q", c.name, got, "entry-1entry-2")
			}
			if got, obs := fsyncCounts(t, reg); got != c.syncs || obs != c.syncs {
				t.Fatalf("after %s: fsyncs = %d, observed = %d, want %d", c.name, got, obs, c.syncs)
			}
		})
	}

	// Pebble recycles a WAL file into the next one with ReuseForWrite.
	f, err := fs.ReuseForWrite("/data/raft/host/1/000001.log", "/data/raft/host/1/000006.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := fsyncCounts(t, reg); got != 5 {
		t.Fatalf("after a sync of a reused WAL file: fsyncs = %d, want 5", got)
	}

	// Unregistered, new WAL files are the inner FS's; open ones keep counting.
	done()
	g, err := fs.Create("/data/raft/host/1/000007.log")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.(*syncCountingFile); ok {
		t.Fatal("a WAL file created after unregister counts its syncs")
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := fsyncCounts(t, reg); got != 6 {
		t.Fatalf("after a sync of a WAL file opened before unregister: fsyncs = %d, want 6", got)
	}
}

// On disk a counted WAL file issues fdatasync itself and shows Pebble no
// descriptor: Pebble's syncing file would fdatasync a descriptor it found
// directly, and those syncs would not be counted.
func TestWALSyncFSOnDiskHidesTheDescriptor(t *testing.T) {
	fs := newWALSyncFS(raftLogFS.FS) // the default FS raftLogFS wraps
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	done, err := fs.register(dir, newRaftLogMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	name := filepath.Join(dir, "000001.log")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := f.(*syncCountingFile)
	if !ok || c.fd == 0 {
		t.Fatalf("Create(%s) = %T (fd known %v), want a counting file over an os file", name, f, ok && c.fd != 0)
	}
	if _, ok := f.(interface{ Fd() uintptr }); ok {
		t.Fatal("the counting WAL file has an Fd method: Pebble would sync past it")
	}
	write(t, f, "entry")
	if err := f.Sync(); err != nil {
		t.Fatalf("Sync() = %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, fs, name); got != "entry" {
		t.Fatalf("%s reads %q, want %q", name, got, "entry")
	}
	if got, obs := fsyncCounts(t, reg); got != 1 || obs != 1 {
		t.Fatalf("fsyncs = %d, observed = %d, want 1", got, obs)
	}
	// The process-wide default, which the LogDB opens its files through, is raftLogFS.
	if pvfs.Default != pvfs.FS(raftLogFS) {
		t.Fatalf("pebble vfs.Default = %T, want raftLogFS", pvfs.Default)
	}
}

var errDiskGone = errors.New("disk gone")

// failingSyncFS is a memory FS whose files fail Sync.
type failingSyncFS struct{ pvfs.FS }

type failingSyncFile struct{ pvfs.File }

func (fs failingSyncFS) Create(name string) (pvfs.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return failingSyncFile{f}, nil
}

func (failingSyncFile) Sync() error { return errDiskGone }

// Errors pass through unchanged; a failed sync is still a sync attempted.
func TestWALSyncFSPassesErrorsThrough(t *testing.T) {
	fs := newWALSyncFS(failingSyncFS{pvfs.NewMem()})
	reg := prometheus.NewRegistry()
	if _, err := fs.register("/raft", newRaftLogMetrics(reg)); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create("/raft/missing-dir/000001.log"); err == nil {
		t.Fatal("Create in a missing dir: nil error, want the inner FS's")
	}
	if err := fs.MkdirAll("/raft", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/raft/000001.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, errDiskGone) {
		t.Fatalf("Sync() = %v, want %v", err, errDiskGone)
	}
	if got, obs := fsyncCounts(t, reg); got != 1 || obs != 1 {
		t.Fatalf("fsyncs = %d, observed = %d, want 1", got, obs)
	}
}

// A broker's Raft log syncs are counted on its registry: every commit waits
// for one, so sequential proposals add at least one each; linearizable reads
// (a ReadIndex, no log write) add none of their own.
func TestRaftLogFsyncsCountedPerCommitNotPerRead(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := startOneBrokerHost(t.Context(), t, reg, nil)
	_, lead := waitShardLeader(t, h)
	started, _ := fsyncCounts(t, reg)
	if started == 0 {
		t.Fatal("fsyncs = 0 after the meta group and a shard elected and committed, want > 0")
	}

	const proposals = 20
	proposeSweeps(t, lead, proposals)
	proposed, observed := fsyncCounts(t, reg)
	if proposed < started+proposals {
		t.Fatalf("fsyncs = %d after %d sequential proposals from %d, want at least %d", proposed, proposals, started, started+proposals)
	}
	if observed != proposed {
		t.Fatalf("fsync durations observed = %d, want one per fsync (%d)", observed, proposed)
	}

	const reads = 100
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for range reads {
		if _, err := h.MetaClient().ReadMeta(ctx); err != nil {
			t.Fatalf("ReadMeta: %v", err)
		}
	}
	read, _ := fsyncCounts(t, reg)
	stateSyncs := counter(t, reg, "sundial_broker_state_db_fsyncs_total")
	t.Logf("fsyncs: %d at the first lead, %d after %d proposals, %d after %d reads; state DB fsyncs %d", started, proposed, proposals, read, reads, stateSyncs)
	// The state machine applies without a sync (the Raft log is the durable
	// copy); 20 proposals are far from a snapshot (SnapshotEntries 1000).
	if stateSyncs >= proposals {
		t.Errorf("state DB fsyncs = %d after %d proposals applied, want fewer than one per apply", stateSyncs, proposals)
	}
	// Background commits of the meta group and the shard may add a few; a
	// sync per read would add at least reads.
	if read-proposed >= reads/2 {
		t.Fatalf("fsyncs grew by %d over %d linearizable reads (from %d to %d), want far fewer than one per read", read-proposed, reads, proposed, read)
	}
}

// BenchmarkWALSync is what counting adds to a WAL sync: the same memory
// file's Sync, counted (two clock reads, a counter and a histogram) and not.
func BenchmarkWALSync(b *testing.B) {
	fs := newWALSyncFS(pvfs.NewMem())
	if _, err := fs.register("/raft", newRaftLogMetrics(prometheus.NewRegistry())); err != nil {
		b.Fatal(err)
	}
	if err := fs.MkdirAll("/raft", 0o755); err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"/raft/000001.log", "/raft/000002.sst"} {
		f, err := fs.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		_, counted := f.(*syncCountingFile)
		b.Run(fmt.Sprintf("counted=%v", counted), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A host restarted on the same data dir registers it again before the old
// one's unregister may run (a Stop after the new New): the new host keeps
// counting.
func TestWALSyncFSReregisteredDirCountsOnTheNewHost(t *testing.T) {
	fs := newWALSyncFS(pvfs.NewMem())
	if err := fs.MkdirAll("/raft", 0o755); err != nil {
		t.Fatal(err)
	}
	oldReg, newReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	oldDone, err := fs.register("/raft", newRaftLogMetrics(oldReg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.register("/raft", newRaftLogMetrics(newReg)); err != nil {
		t.Fatal(err)
	}
	oldDone()
	f, err := fs.Create("/raft/000001.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if o, _ := fsyncCounts(t, oldReg); o != 0 {
		t.Errorf("old host's fsyncs = %d, want 0", o)
	}
	if n, _ := fsyncCounts(t, newReg); n != 1 {
		t.Errorf("new host's fsyncs = %d, want 1", n)
	}
}
