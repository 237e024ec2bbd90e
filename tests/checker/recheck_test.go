package checker

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/history"
)

// TestRecheckHistory checks a saved history (make chaos writes one per
// failing seed): CHECK_HISTORY=path, CHECK_GROUPS=topic:g1,g2 (default
// chaos:default,second), CHECK_DEDUP_WINDOW=the brokers' dedup_window
// (default 10m, the broker's default). Skipped when CHECK_HISTORY is unset.
func TestRecheckHistory(t *testing.T) {
	path := os.Getenv("CHECK_HISTORY")
	if path == "" {
		t.Skip("set CHECK_HISTORY to a history file")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ops, err := history.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	spec := os.Getenv("CHECK_GROUPS")
	if spec == "" {
		spec = "chaos:default,second"
	}
	topic, groups, _ := strings.Cut(spec, ":")
	window := 10 * time.Minute
	if v := os.Getenv("CHECK_DEDUP_WINDOW"); v != "" {
		if window, err = time.ParseDuration(v); err != nil {
			t.Fatalf("CHECK_DEDUP_WINDOW: %v", err)
		}
	}
	res := Check(Config{Groups: map[string][]string{topic: strings.Split(groups, ",")}, DedupWindow: window}, ops)
	t.Logf("%s", res.Summary())
	if len(res.Violations) > 0 {
		t.Errorf("%s", res)
	}
}
