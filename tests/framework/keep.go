package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/tests/history"
)

// KeepDir makes a directory for the evidence of a failing test that
// outlives the test (t.TempDir is removed when the test ends, so a path in
// it printed in a failure points at nothing): data/failures/<test>-<n>
// under the repository root (data/ is ignored by git), or under
// os.TempDir() when there is no root. Call it once the test has failed;
// nothing removes the directory, and a passing test never makes one.
func KeepDir(t testing.TB) (string, error) {
	base := filepath.Join(os.TempDir(), "sundial-failures")
	if root, err := RepoRoot(); err == nil {
		base = filepath.Join(root, "data", "failures")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	name := strings.NewReplacer("/", "_", " ", "_", string(filepath.Separator), "_").Replace(t.Name())
	return os.MkdirTemp(base, name+"-")
}

// KeepHistory writes ops as JSON lines (history.WriteJSON) into a new
// KeepDir and returns the file's path, for the failure message to name.
// On an error the path says so instead, and the failure still reads.
func KeepHistory(t testing.TB, ops []history.Op) string {
	dir, err := KeepDir(t)
	if err != nil {
		return "not kept: " + err.Error()
	}
	path := filepath.Join(dir, "history.jsonl")
	if err := WriteHistory(path, ops); err != nil {
		return "not kept: " + err.Error()
	}
	return path
}

// WriteHistory writes ops as JSON lines to path, making its directory.
func WriteHistory(path string, ops []history.Op) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := history.WriteJSON(f, ops); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
