package e2e

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/framework"
)

// A broker started on a data dir it cannot serve from stops at once with
// one message saying what is wrong and what to do, and exit status 3: on
// an old copy of its own data dir (taken before the node's last start: its
// start count is below the cluster's) and on a Raft log file that fails
// its checksum. Before, both
// panicked inside Dragonboat with a stack trace ("invalid commitTo index",
// "pebble/table: invalid table"), exit status 2, again at every restart.
func TestBrokerStopsOnABadDataDir(t *testing.T) {
	c := framework.NewCluster(t, framework.Config{Brokers: 3, Shards: 2, StartTimeout: 90 * time.Second})
	ctl := shardctl{t: t, bin: buildShardctl(t), proxy: c.ProxyAddrs()[0]}
	const node = 3
	dir := c.Brokers[node-1].DataDir
	old, current := t.TempDir()+"/old", t.TempDir()+"/current"

	if err := c.Kill(node); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, old)
	if err := c.Restart(node); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Entries the cluster commits with node 3 after the copy.
	ctl.publish("datadir", "after-copy", 200, time.Hour)
	if err := c.Kill(node); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, current)

	// stops restarts the broker on its data dir and wants it to stop with
	// the one message.
	stops := func(what, want string) {
		t.Helper()
		from, err := os.Stat(c.LogPath(node))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(node); err != nil {
			t.Fatal(err)
		}
		code, err := c.ExitCode(node, 2*time.Minute)
		logSince := func() string {
			b, err := os.ReadFile(c.LogPath(node))
			if err != nil {
				t.Fatal(err)
			}
			return string(b[from.Size():])
		}
		if err != nil {
			t.Fatalf("broker on %s: %v", what, err)
		}
		log := logSince()
		t.Logf("broker on %s: exit status %d, says:\n%s", what, code, lastLines(log, 3))
		if code != 3 {
			t.Errorf("broker on %s: exit status %d, want 3", what, code)
		}
		for _, s := range []string{want, "remove-node --force 3", "--join", dir} {
			if !strings.Contains(log, s) {
				t.Errorf("broker on %s: log lacks %q:\n%s", what, s, lastLines(log, 20))
			}
		}
		if strings.Contains(log, "goroutine ") || strings.Contains(log, "panic:") {
			t.Errorf("broker on %s: log holds a panic's stack:\n%s", what, lastLines(log, 20))
		}
	}

	// The copy predates the node's last start, so its start count is below
	// the one the peers know: the broker stops before Dragonboat opens
	// the stale log.
	replaceDir(t, dir, old)
	stops("an old copy of its data dir", "is older than the one node 3 last ran on")
	if b, _ := os.ReadFile(c.LogPath(node)); !strings.Contains(string(b), "holds the node's start 1, but peer node") {
		t.Errorf("broker on an old copy: not refused by its start count before Dragonboat started:\n%s", lastLines(string(b), 20))
	}

	replaceDir(t, dir, current)
	corruptRaftTable(t, dir)
	stops("a corrupted Raft log file", "the Raft log in "+dir+" cannot be read")
}

// copyDir copies the tree src to dst (cp -a: the data dir holds only files).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// replaceDir makes dir a copy of src.
func replaceDir(t *testing.T, dir, src string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, src, dir)
}

// corruptRaftTable overwrites bytes in the middle of every table file of
// the Raft log (Dragonboat's LogDB under <data dir>/raft).
func corruptRaftTable(t *testing.T, dir string) {
	t.Helper()
	var tables []string
	err := filepath.WalkDir(filepath.Join(dir, "raft"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".sst") && strings.Contains(path, "logdb") {
			tables = append(tables, path)
		}
		return err
	})
	if err != nil || len(tables) == 0 {
		t.Fatalf("no Raft log table under %s (%v)", filepath.Join(dir, "raft"), err)
	}
	for _, path := range tables {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", 64)), st.Size()/3); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
