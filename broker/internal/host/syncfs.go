package host

import (
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pvfs "github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counting the Raft log's fsyncs.
//
// Dragonboat's LogDB (the Raft log) is its own, older Pebble (DESIGN §6,
// github.com/cockroachdb/pebble, not Sundial's pebble/v2). NodeHostConfig's
// Expert.FS cannot carry a counting wrapper: the LogDB refuses any FS but
// the default, its memory FS and its error-injecting FS (logdb's
// newDefaultKVStore panics "invalid fs", which NewNodeHost recovers into a
// nil NodeHost and a nil error), and the error-injecting one puts
// the NodeHost into a test mode in which a panicking step worker is
// swallowed instead of ending the process. With the default Expert.FS,
// Dragonboat leaves pebble.Options.FS unset and the LogDB opens its files
// through that Pebble's process-wide vfs.Default. So this package wraps
// vfs.Default, once, while it is initialised (before any NodeHost can open a
// LogDB), with raftLogFS.
//
// raftLogFS counts the syncs of write-ahead-log files (*.log) created under
// a raft dir a Host registered, on that Host's metrics: one sync per LogDB
// write that persists Raft entries or state (Dragonboat writes with
// Sync: true), which is what every commit waits for. Every other file is
// the default FS's own, untouched: sstables, the MANIFEST, directories,
// files opened for reading, and the files of LogDBs no Host registered
// (nothing else in a broker uses this older Pebble).
//
// A counted WAL file issues the very fdatasync Pebble issues on the default
// FS. It has to hide the file descriptor: Pebble's syncing-file wrapper
// calls fdatasync on a descriptor it finds directly, past any wrapper. The
// one other effect is that Pebble, finding no descriptor, does not
// preallocate the WAL (fallocate ahead of the writes); on this machine's
// ext4, 1,800 300-byte appends each followed by a sync took the same time
// with and without it (mean 1.1–1.3 ms both, p99 6.3–6.8 ms).
var raftLogFS = installRaftLogFS()

func installRaftLogFS() *walSyncFS {
	fs := newWALSyncFS(pvfs.Default)
	pvfs.Default = fs
	return fs
}

// raftLogMetrics are one Host's Raft log sync counters.
type raftLogMetrics struct {
	fsyncs       prometheus.Counter
	fsyncSeconds prometheus.Histogram
}

func newRaftLogMetrics(reg prometheus.Registerer) *raftLogMetrics {
	m := &raftLogMetrics{
		fsyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "raft_log_fsyncs_total",
			Help: "Syncs (fdatasync) of this broker's Raft log write-ahead log: one per LogDB write of Raft entries or state, which every commit waits for.",
		}),
		fsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "raft_log_fsync_duration_seconds",
			Help:    "Time one sync of this broker's Raft log write-ahead log took.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 15), // 50 µs … 0.82 s
		}),
	}
	reg.MustRegister(m.fsyncs, m.fsyncSeconds)
	return m
}

func (m *raftLogMetrics) observe(d time.Duration) {
	m.fsyncs.Inc()
	m.fsyncSeconds.Observe(d.Seconds())
}

// walSyncFS is an FS whose write-ahead-log files under registered dirs
// count their syncs; everything else is the inner FS's. Its methods run on
// Pebble's goroutines (open, flush, WAL rotation); register and unregister
// on a Host's New and Stop.
type walSyncFS struct {
	pvfs.FS
	mu   sync.RWMutex
	dirs map[string]*raftLogMetrics // guarded by mu: absolute raft dir → its Host's metrics
}

func newWALSyncFS(inner pvfs.FS) *walSyncFS {
	return &walSyncFS{FS: inner, dirs: map[string]*raftLogMetrics{}}
}

// register counts the syncs of WAL files created under dir from now on
// on m; unregister stops that (WAL files already open keep counting on m).
func (fs *walSyncFS) register(dir string, m *raftLogMetrics) (unregister func(), err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	fs.dirs[dir] = m
	fs.mu.Unlock()
	return func() {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		// A host restarted on the same dir may have registered it again.
		if fs.dirs[dir] == m {
			delete(fs.dirs, dir)
		}
	}, nil
}

// metricsOf returns the metrics of the registered dir holding name, nil if none.
func (fs *walSyncFS) metricsOf(name string) *raftLogMetrics {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	for dir, m := range fs.dirs {
		if strings.HasPrefix(name, dir+string(filepath.Separator)) {
			return m
		}
	}
	return nil
}

// Create is the inner FS's Create; a WAL file under a registered dir counts its syncs.
func (fs *walSyncFS) Create(name string) (pvfs.File, error) {
	f, err := fs.FS.Create(name)
	return fs.counted(name, f, err)
}

// ReuseForWrite is the inner FS's; Pebble recycles old WAL files with it.
func (fs *walSyncFS) ReuseForWrite(oldname, newname string) (pvfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	return fs.counted(newname, f, err)
}

func (fs *walSyncFS) counted(name string, f pvfs.File, err error) (pvfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	m := fs.metricsOf(name)
	if m == nil {
		return f, nil
	}
	c := &syncCountingFile{File: f, m: m}
	if d, ok := f.(interface{ Fd() uintptr }); ok {
		c.fd = d.Fd()
	}
	return c, nil
}

// syncCountingFile is a WAL file whose Sync is counted and timed. It has no
// Fd method on purpose (see raftLogFS); Write, Close and the rest are the
// inner file's.
type syncCountingFile struct {
	pvfs.File
	fd uintptr // the inner file's descriptor, 0 if it has none
	m  *raftLogMetrics
}

// Sync is fdatasync on the descriptor, as Pebble's own syncing file does
// (or the inner file's Sync if it has no descriptor); its error is returned
// as is. Failed syncs count too.
func (f *syncCountingFile) Sync() error {
	start := time.Now()
	err := datasync(f.File, f.fd)
	f.m.observe(time.Since(start))
	return err
}

// stateSyncCollector serves the syncs of the state DB's (Sundial's own
// pebble/v2) write-ahead log, read at scrape time from the DB's own WAL
// fsync histogram. The state machine commits its applies without a sync
// (the Raft log is the durable copy) and syncs at open, before Dragonboat
// compacts a shard's log (a Raft snapshot), and in recovery and moves, so
// this stays far below the Raft log's count. Collect runs on the scrape
// goroutine; close, from Stop before the DB closes, makes it serve the
// last count read.
type stateSyncCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	db   *pebble.DB // guarded by mu; nil once closed
	last uint64     // guarded by mu: the count read last
}

func newStateSyncCollector(db *pebble.DB) *stateSyncCollector {
	return &stateSyncCollector{
		db: db,
		desc: prometheus.NewDesc("sundial_broker_state_db_fsyncs_total",
			"Syncs of the state DB's write-ahead log (applies commit without one).", nil, nil),
	}
}

func (c *stateSyncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateSyncCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.db != nil {
		var m dto.Metric
		if err := c.db.Metrics().LogWriter.FsyncLatency.Write(&m); err == nil {
			c.last = m.GetHistogram().GetSampleCount()
		}
	}
	n := c.last
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n))
}

func (c *stateSyncCollector) close() {
	c.mu.Lock()
	c.db = nil
	c.mu.Unlock()
}
