package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

// What Dragonboat panics with for a log behind the cluster or a corrupt log
// file becomes a DataDirError naming the data dir and what to do; anything
// else stays a panic with its stack (nil here).
func TestDataDirFault(t *testing.T) {
	for _, tc := range []struct {
		detail string
		want   error
		says   string
	}{
		{"invalid commitTo index 210, lastIndex() 9", ErrDataDirBehind, "is older than the one node 3 last ran on"},
		{"pebble/table: invalid table 000004 (checksum mismatch at 0/2033)\n(1) attached stack trace\n  -- stack trace:", ErrRaftLogCorrupt, "the Raft log in /d cannot be read (pebble/table: invalid table 000004 (checksum mismatch at 0/2033))"},
		{"pebble: corruption in the WAL", ErrRaftLogCorrupt, "cannot be read"},
		{"unexpected entry type", nil, ""},
	} {
		err := dataDirFault(tc.detail, "/d", 3)
		if tc.want == nil {
			if err != nil {
				t.Errorf("dataDirFault(%q) = %v, want nil", tc.detail, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("dataDirFault(%q) = %v, want %v", tc.detail, err, tc.want)
			continue
		}
		for _, s := range []string{tc.says, "/d", "remove-node --force 3", "--join"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("dataDirFault(%q) = %q, want it to say %q", tc.detail, err, s)
			}
		}
		if strings.Contains(err.Error(), "stack trace") {
			t.Errorf("dataDirFault(%q) = %q carries Dragonboat's stack", tc.detail, err)
		}
	}
}

// A host on a data dir whose Raft log table fails its checksum returns a
// DataDirError from New or Start (Dragonboat panics on it while it opens
// the log; in a process without a fault handler the host recovers that
// panic). Before, the panic went up through Start.
func TestHostOnACorruptRaftLogReturnsTheFault(t *testing.T) {
	dir := t.TempDir()
	raftAddr, grpcAddr := loopbackAddr(t), loopbackAddr(t)
	cfg := Config{
		NodeID: 1, RaftAddr: raftAddr, GRPCAddr: grpcAddr, DataDir: dir,
		InitialMembers: map[uint64]Member{1: {RaftAddr: raftAddr, GRPCAddr: grpcAddr}},
		RTT:            10 * time.Millisecond, ElectionRTT: 20, HeartbeatRTT: 2, SnapshotEntries: 1000,
		RaftWorkers: 1, RaftLogShards: 1, CacheBytes: 1 << 20, MemTableBytes: 1 << 20,
	}
	open := func() (*Host, error) {
		h, err := New(cfg, zaptest.NewLogger(t), prometheus.NewRegistry())
		if err != nil {
			return nil, err
		}
		if err := h.Start(t.Context()); err != nil {
			h.Stop()
			return nil, err
		}
		return h, nil
	}
	// Two runs: the second opens the first's log and writes it to a table.
	for range 2 {
		h, err := open()
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for h.MetaClient().MetaLeader() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if h.MetaClient().MetaLeader() == 0 {
			t.Fatal("the meta group has no leader after 60s")
		}
		h.Stop()
	}
	var tables []string
	_ = filepath.WalkDir(filepath.Join(dir, "raft"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".sst") {
			tables = append(tables, path)
		}
		return err
	})
	if len(tables) == 0 {
		t.Fatalf("no Raft log table under %s", filepath.Join(dir, "raft"))
	}
	for _, path := range tables {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 3; i < len(b)/3+64 && i < len(b); i++ {
			b[i] ^= 0xa5
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	h, err := open()
	if err == nil {
		h.Stop()
		t.Fatal("New and Start on a corrupt Raft log = nil, want a DataDirError")
	}
	var de *DataDirError
	if !errors.As(err, &de) || !errors.Is(err, ErrRaftLogCorrupt) || de.DataDir != dir {
		t.Fatalf("New and Start on a corrupt Raft log = %v, want a DataDirError wrapping ErrRaftLogCorrupt for %s", err, dir)
	}
	t.Logf("refused: %v", err)
}
