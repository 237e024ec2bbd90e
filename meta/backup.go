package meta

import (
	"maps"
	"slices"
)

// Backups (docs/operations.md, "Backups"). A backup run is persisted here
// and carried out by the executor on the meta leader (package operator's
// backup loop): it writes the catalog file, captures every shard the run
// names on one of its hosts (each capture recorded by record_backup as it
// completes, so a new meta leader resumes the run with the shards left),
// writes the manifest and ends the run with finish_backup. The rules the
// state machine keeps:
//   - At most one run is running at a time: start_backup answers
//     ResultBusy with the running run's id otherwise, and ResultNoop for a
//     start of the run that is running (a retried proposal).
//   - A run names the shards serving when it starts; shards added later
//     are in the next backup.
//   - record_backup and finish_backup of a run that is not running change
//     nothing (ResultNotFound): a capture that completes after its run
//     failed is not recorded.
//   - At most BackupRunsKept finished runs are kept, the oldest dropped
//     first: the destination's manifests are the record of backups; the
//     runs are what an operator follows.

// Backup kinds and run statuses.
const (
	BackupFull        = "full"
	BackupIncremental = "incremental"

	BackupRunning = "running"
	BackupDone    = "done"
	BackupFailed  = "failed"
)

// BackupRunsKept bounds the finished runs the state keeps.
const BackupRunsKept = 20

// BackupFile is one file a backup wrote: its name in the destination,
// size and SHA-256 (hex).
type BackupFile struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ShardCapture is a shard's part of a backup run.
type ShardCapture struct {
	Shard EventShardID `json:"shard"`
	BackupFile
	// Index is the Raft index captured; Since the index an incremental
	// capture builds on (0 when Kind is BackupFull).
	Index    uint64 `json:"index"`
	Since    uint64 `json:"since,omitempty"`
	Kind     string `json:"kind"`
	Records  int64  `json:"records"`
	Messages int64  `json:"messages"`
}

// BackupRun is one backup the meta leader's executor carries out.
type BackupRun struct {
	ID string `json:"id"`
	// Parent is the backup an incremental run builds on.
	Parent string `json:"parent,omitempty"`
	Kind   string `json:"kind"`
	// Dest is the destination URL (destination URLs hold no secrets).
	Dest      string `json:"dest"`
	Scheduled bool   `json:"scheduled,omitempty"`
	Status    string `json:"status"`
	// Error says why a failed run failed, or why the last try of a
	// running run's step failed.
	Error        string `json:"error,omitempty"`
	StartedAtMs  int64  `json:"started_at_ms"`
	FinishedAtMs int64  `json:"finished_at_ms,omitempty"`
	// Shards are the shards the run captures, ascending.
	Shards []EventShardID `json:"shards"`
	// Catalog is the catalog file, once written.
	Catalog  *BackupFile                    `json:"catalog,omitempty"`
	Captures map[EventShardID]*ShardCapture `json:"captures,omitempty"`
}

// Clone is a deep copy.
func (r *BackupRun) Clone() *BackupRun {
	c := *r
	c.Shards = slices.Clone(r.Shards)
	if r.Catalog != nil {
		f := *r.Catalog
		c.Catalog = &f
	}
	if r.Captures != nil {
		c.Captures = make(map[EventShardID]*ShardCapture, len(r.Captures))
		for id, sc := range r.Captures {
			cc := *sc
			c.Captures[id] = &cc
		}
	}
	return &c
}

// Running says the run has not ended.
func (r *BackupRun) Running() bool { return r.Status == BackupRunning }

// RunningBackup returns the running backup run, nil if none.
func (s *State) RunningBackup() *BackupRun {
	for _, r := range s.Backups {
		if r.Running() {
			return r
		}
	}
	return nil
}

// BackupRun returns the run with id (the newest when id is empty), nil if
// the state does not keep it.
func (s *State) BackupRun(id string) *BackupRun {
	for i := len(s.Backups) - 1; i >= 0; i-- {
		if id == "" || s.Backups[i].ID == id {
			return s.Backups[i]
		}
	}
	return nil
}

// startBackup stores r as the running run; see the rules above.
func (s *State) startBackup(r *BackupRun, nowMs int64) uint64 {
	if r == nil || r.ID == "" || r.Dest == "" || (r.Kind != BackupFull && r.Kind != BackupIncremental) ||
		(r.Kind == BackupIncremental) != (r.Parent != "") {
		return ResultInvalid
	}
	if cur := s.RunningBackup(); cur != nil {
		if cur.ID == r.ID {
			return ResultNoop
		}
		return ResultBusy
	}
	if s.BackupRun(r.ID) != nil {
		return ResultExists
	}
	run := &BackupRun{ID: r.ID, Parent: r.Parent, Kind: r.Kind, Dest: r.Dest, Scheduled: r.Scheduled, Status: BackupRunning, StartedAtMs: nowMs}
	for _, id := range s.ShardIDs() {
		if s.Shards[id].State != ShardStarting {
			run.Shards = append(run.Shards, id)
		}
	}
	s.Backups = append(s.Backups, run)
	if sc := s.BackupSchedule; r.Scheduled && sc != nil {
		// The next run is due every after this one, or now if runs fell
		// behind (a long run, a cluster down): never a burst of runs.
		sc.NextAtMs = max(sc.NextAtMs+sc.EveryMs, nowMs+1)
		sc.LastRun = run.ID
		if run.Kind == BackupFull {
			sc.LastFullAtMs = nowMs
		}
	}
	return ResultOK
}

// recordBackup records the catalog file (shard capture nil) or a shard's
// capture of the running run id, or with neither notes err as the last
// failed try.
func (s *State) recordBackup(id string, catalog *BackupFile, sc *ShardCapture, note string) uint64 {
	r := s.BackupRun(id)
	if r == nil || !r.Running() {
		return ResultNotFound
	}
	switch {
	case catalog != nil:
		f := *catalog
		r.Catalog = &f
	case sc != nil:
		if !slices.Contains(r.Shards, sc.Shard) {
			return ResultInvalid
		}
		if r.Captures == nil {
			r.Captures = map[EventShardID]*ShardCapture{}
		}
		c := *sc
		r.Captures[sc.Shard] = &c
	}
	r.Error = note
	return ResultOK
}

// finishBackup ends the running run id: done, or failed with err.
func (s *State) finishBackup(id, err string, nowMs int64) uint64 {
	r := s.BackupRun(id)
	if r == nil || !r.Running() {
		return ResultNotFound
	}
	r.Status, r.Error, r.FinishedAtMs = BackupDone, err, nowMs
	if err != "" {
		r.Status = BackupFailed
	}
	finished := 0
	for _, r := range s.Backups {
		if !r.Running() {
			finished++
		}
	}
	for i := 0; finished > BackupRunsKept && i < len(s.Backups); {
		if s.Backups[i].Running() {
			i++
			continue
		}
		s.Backups = slices.Delete(s.Backups, i, i+1)
		finished--
	}
	return ResultOK
}

// BackupSchedule is the cluster's backup schedule (set_backup_schedule):
// the meta leader's executor starts a run every EveryMs (the first when
// the schedule is set), full when the last full scheduled run started
// FullEveryMs ago or more (every run when 0), and after each scheduled run
// that finishes deletes the backups in Dest older than KeepMs that no kept
// backup builds on (none when 0).
type BackupSchedule struct {
	Dest        string `json:"dest"`
	EveryMs     int64  `json:"every_ms"`
	FullEveryMs int64  `json:"full_every_ms,omitempty"`
	KeepMs      int64  `json:"keep_ms,omitempty"`
	// NextAtMs is when the next scheduled run is due; LastFullAtMs when
	// the last full scheduled run started (0: none yet); LastRun the last
	// scheduled run's id. start_backup of a scheduled run moves them on.
	NextAtMs     int64  `json:"next_at_ms"`
	LastFullAtMs int64  `json:"last_full_at_ms,omitempty"`
	LastRun      string `json:"last_run,omitempty"`
}

// MinBackupEveryMs is the shortest interval a backup schedule takes.
const MinBackupEveryMs = 60_000

// Valid says what is wrong with a schedule to be set, "" if nothing.
func (b *BackupSchedule) Valid() string {
	switch {
	case b.Dest == "":
		return "dest must be set"
	case b.EveryMs < MinBackupEveryMs:
		return "every must be at least a minute"
	case b.FullEveryMs != 0 && b.FullEveryMs < b.EveryMs:
		return "full-every must be at least every (or 0: every backup full)"
	case b.KeepMs != 0 && b.KeepMs < max(b.FullEveryMs, b.EveryMs):
		return "keep must be at least full-every and every (or 0: keep every backup): the chain kept needs its full backup"
	}
	return ""
}

// FullDue says a scheduled run starting at nowMs is a full one.
func (b *BackupSchedule) FullDue(nowMs int64) bool {
	return b.FullEveryMs == 0 || b.LastFullAtMs == 0 || nowMs-b.LastFullAtMs >= b.FullEveryMs
}

// setBackupSchedule sets (nil: clears) the schedule; the first run is due
// at once.
func (s *State) setBackupSchedule(b *BackupSchedule, nowMs int64) uint64 {
	if b == nil {
		s.BackupSchedule = nil
		return ResultOK
	}
	if b.Valid() != "" {
		return ResultInvalid
	}
	sc := &BackupSchedule{Dest: b.Dest, EveryMs: b.EveryMs, FullEveryMs: b.FullEveryMs, KeepMs: b.KeepMs, NextAtMs: nowMs}
	if old := s.BackupSchedule; old != nil && old.Dest == b.Dest {
		sc.LastFullAtMs, sc.LastRun = old.LastFullAtMs, old.LastRun
	}
	s.BackupSchedule = sc
	return ResultOK
}

// Catalog is what a backup keeps of the meta state: what a restored
// cluster needs to serve the restored shards as the backed-up one did.
// Nodes, placement, operations and the cluster id belong to the cluster,
// not its data, and are not in it.
type Catalog struct {
	// ClusterID and Shards describe the backed-up cluster: a restore needs
	// a cluster serving the same shards (their ids place partitions on the
	// ring).
	ClusterID string            `json:"cluster_id"`
	Shards    []EventShardID    `json:"shards"`
	Topics    map[string]*Topic `json:"topics"`
	Auth      *Auth             `json:"auth,omitempty"`
}

// Catalog returns the catalog of s: the serving shards, the topics but
// those being deleted, and the auth state without its receipt keys
// (receipts of the backed-up cluster do not outlive a restore: leases are
// given up).
func (s *State) Catalog() *Catalog {
	c := &Catalog{ClusterID: s.ClusterID, Topics: map[string]*Topic{}}
	for _, id := range s.ShardIDs() {
		if s.Shards[id].State != ShardStarting {
			c.Shards = append(c.Shards, id)
		}
	}
	for name, t := range s.Topics {
		if t.Deleting == 0 {
			c.Topics[name] = t.Clone()
		}
	}
	if a := s.Auth.Clone(); a != nil {
		a.ReceiptKeys = nil
		c.Auth = a
	}
	return c
}

// restoreCatalog installs the catalog of backup id's topics, tokens and
// roles into a cluster that has no topics (ResultExists otherwise), and
// records id as RestoredFrom. Tokens and
// roles the cluster has keep theirs (the operator's token of the new
// cluster goes on working); the others are added. The cluster keeps its
// own id, nodes, shards and receipt keys.
func (s *State) restoreCatalog(id string, c *Catalog) uint64 {
	if c == nil {
		return ResultInvalid
	}
	if len(s.Topics) > 0 {
		return ResultExists
	}
	for name, t := range c.Topics {
		tt := t.Clone()
		tt.Deleting = 0
		s.Topics[name] = tt
	}
	if c.Auth != nil && (len(c.Auth.Tokens) > 0 || len(c.Auth.Roles) > 0) {
		a := s.auth()
		for name, t := range c.Auth.Tokens {
			if _, ok := a.Tokens[name]; !ok {
				tt := *t
				tt.Hash = slices.Clone(t.Hash)
				if a.Tokens == nil {
					a.Tokens = map[string]*Token{}
				}
				a.Tokens[name] = &tt
			}
		}
		for name, r := range c.Auth.Roles {
			if _, ok := a.Roles[name]; !ok {
				if a.Roles == nil {
					a.Roles = map[string]*Role{}
				}
				rr := *r
				rr.Grants = slices.Clone(r.Grants)
				a.Roles[name] = &rr
			}
		}
		a.Revision++
	}
	s.RestoredFrom = id
	s.Version++
	return ResultOK
}

// cloneBackups deep-copies the runs.
func cloneBackups(rs []*BackupRun) []*BackupRun {
	if rs == nil {
		return nil
	}
	c := make([]*BackupRun, len(rs))
	for i, r := range rs {
		c[i] = r.Clone()
	}
	return c
}

// TopicNames lists the catalog's topics, sorted.
func (c *Catalog) TopicNames() []string { return slices.Sorted(maps.Keys(c.Topics)) }

func cloneSchedule(b *BackupSchedule) *BackupSchedule {
	if b == nil {
		return nil
	}
	c := *b
	return &c
}
