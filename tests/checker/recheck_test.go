package checker

import (
	"os"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/tests/history"
)

// TestRecheckHistory checks a saved history (make chaos writes one per
// failing seed): CHECK_HISTORY=path, CHECK_GROUPS=topic:g1,g2 (default
// chaos:default,second). Skipped when CHECK_HISTORY is unset.
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
	res := Check(Config{Groups: map[string][]string{topic: strings.Split(groups, ",")}}, ops)
	t.Logf("%s", res.Summary())
	if len(res.Violations) > 0 {
		t.Errorf("%s", res)
	}
}
