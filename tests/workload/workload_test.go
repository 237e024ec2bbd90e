package workload

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/history"
)

// TestWorkloadWithoutFaults runs the mixed load on a healthy cluster: the
// baseline the chaos runs are compared with. The history must check clean.
func TestWorkloadWithoutFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := framework.NewCluster(t, framework.Config{Shards: 4, LogLevel: "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := New(ctx, Config{Seed: 1, Duration: 15 * time.Second, Ops: 600}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	w.Run(ctx)
	w.Drain(45 * time.Second)
	ops := w.Recorder().Ops()
	// Every cancel and reschedule carries its own request id, which the SDK
	// keeps across its retries (chaos finding C).
	changeIDs := map[string]bool{}
	for _, op := range ops {
		if op.Kind != history.Cancel && op.Kind != history.Reschedule {
			continue
		}
		if op.RequestID == "" || changeIDs[op.RequestID] {
			t.Errorf("%s of id %q key %q has request id %q, want one of its own", op.Kind, op.MessageID, op.Key, op.RequestID)
		}
		changeIDs[op.RequestID] = true
	}
	if len(changeIDs) == 0 {
		t.Errorf("the workload issued no cancel or reschedule")
	}
	res := checker.Check(w.CheckerConfig(), ops)
	t.Logf("checked: %s; unknown answers:%s", res.Summary(), UnknownCauses(ops))
	if len(res.Violations) > 0 {
		path := filepath.Join(t.TempDir(), "history.jsonl")
		if f, err := os.Create(path); err == nil {
			_ = history.WriteJSON(f, ops)
			f.Close()
		}
		t.Errorf("violations (history in %s):\n%s", path, res)
	}
}
