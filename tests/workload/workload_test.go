package workload

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
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
		t.Errorf("violations (history in %s):\n%s", framework.KeepHistory(t, ops), res)
	}
}

// TestReplayOnlyWithinTheDedupWindow: a request is sent again only while
// the brokers surely remember its id: first invoked less than the window
// less the call timeout and a tenth of the window ago.
func TestReplayOnlyWithinTheDedupWindow(t *testing.T) {
	w := &Workload{cfg: Config{DedupWindow: 10 * time.Minute, CallTimeout: 8 * time.Second}.withDefaults()}
	now := time.Now()
	young := &sundialv1.PublishRequest{RequestId: "young"}
	edge := &sundialv1.PublishRequest{RequestId: "edge"}
	old := &sundialv1.PublishRequest{RequestId: "old"}
	limit := 10*time.Minute - 8*time.Second - time.Minute
	w.remember(known{}, sentRequest{req: old, at: now.Add(-11 * time.Minute)})
	w.remember(known{}, sentRequest{req: edge, at: now.Add(-limit)})
	w.remember(known{}, sentRequest{req: young, at: now.Add(-limit + time.Second)})
	w.remember(known{}, sentRequest{req: young, at: now}) // the same request again: kept once, at its first invoke
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		if got := w.replayable(rng, now); got != young {
			t.Fatalf("replayable() = %v, want only the request first sent %v ago", got, limit-time.Second)
		}
	}
	if len(w.sent) != 1 || !w.sent[0].at.Equal(now.Add(-limit+time.Second)) {
		t.Errorf("sent = %v, want the young request alone, at its first invoke", w.sent)
	}
	if got := w.replayable(rng, now.Add(time.Second)); got != nil {
		t.Errorf("replayable(1s later) = %v, want none: the young request reached the limit", got)
	}
	if got := w.CheckerConfig().DedupWindow; got != 10*time.Minute {
		t.Errorf("CheckerConfig().DedupWindow = %v, want the workload's 10m", got)
	}
}
