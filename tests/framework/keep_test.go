package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/history"
)

// TestKeptHistoryOutlivesTheTest: a history written with KeepHistory
// inside a test is still there, whole, after that test ended, where a
// file in its t.TempDir (what the fault, moves, workload and chaos tests
// named in their failures before) is gone.
func TestKeptHistoryOutlivesTheTest(t *testing.T) {
	ops := []history.Op{{Seq: 0, Kind: history.Publish, Invoke: time.UnixMilli(1), Answer: history.OK, MessageID: "m1"}}
	var kept, temp string
	t.Run("failing", func(t *testing.T) {
		kept = KeepHistory(t, ops)
		temp = filepath.Join(t.TempDir(), "history.jsonl")
		if err := WriteHistory(temp, ops); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(temp); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) after the test = %v, want it removed with t.TempDir", temp, err)
	}
	f, err := os.Open(kept)
	if err != nil {
		t.Fatalf("KeepHistory() = %s, not there after the test: %v", kept, err)
	}
	defer os.RemoveAll(filepath.Dir(kept))
	defer f.Close()
	got, err := history.ReadJSON(f)
	if err != nil || len(got) != 1 || got[0].MessageID != "m1" {
		t.Errorf("ReadJSON(%s) = %v, %v, want the one op written", kept, got, err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "data", "failures") + string(filepath.Separator); !strings.HasPrefix(kept, want) {
		t.Errorf("KeepHistory() = %s, want a file under %s (ignored by git)", kept, want)
	}
}
