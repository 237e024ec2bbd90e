// Package faults holds targeted fault scenarios against a process cluster:
// each places messages, injects one fault at the moment that matters, and
// checks the recorded history (package checker) for zero violations.
package faults

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proc"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/history"
	"github.com/sundialmq/sundial/tests/workload"
)

func start(t *testing.T, topic string, partitions int32) (*framework.Cluster, *workload.Workload, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	c := framework.NewCluster(t, framework.Config{Shards: 2, LogLevel: "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	w, err := workload.New(ctx, workload.Config{Seed: 1, Topic: topic, Partitions: partitions}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	return c, w, ctx
}

// published are the message ids the history's publishes were answered with.
func published(w *workload.Workload) []string {
	var ids []string
	for _, op := range w.Recorder().Ops() {
		if op.Kind == history.Publish && op.Answer == history.OK && op.MessageID != "" {
			ids = append(ids, op.MessageID)
		}
	}
	return ids
}

func shardOf(t *testing.T, id string) uint64 {
	t.Helper()
	m, err := receipt.ParseMessageID(id)
	if err != nil {
		t.Fatalf("ParseMessageID(%q) = %v", id, err)
	}
	return m.Shard()
}

// newLeader waits until shard has a leader other than old.
func newLeader(t *testing.T, c *framework.Cluster, shard uint64, old int) int {
	t.Helper()
	var l int
	framework.WaitFor(t, 60*time.Second, func() error {
		var err error
		if l, err = c.LeaderOf(shard); err != nil {
			return err
		}
		if l == 0 || l == old {
			return fmt.Errorf("shard %d is still led by %d", shard, l)
		}
		return nil
	})
	return l
}

// check drains, checks the whole history and fails t on any violation.
func check(t *testing.T, w *workload.Workload) checker.Result {
	t.Helper()
	w.Drain(90 * time.Second)
	ops := w.Recorder().Ops()
	res := checker.Check(w.CheckerConfig(), ops)
	t.Logf("checked: %s", res.Summary())
	if len(res.Violations) > 0 {
		t.Errorf("violations (history in %s):\n%s", framework.KeepHistory(t, ops), res)
	}
	return res
}

// TestKillLeaderWhileMessagesAreDue SIGKILLs the leader of the messages'
// shard as they fall due and restarts it on its data: no acknowledged
// publish is lost and none is delivered early.
func TestKillLeaderWhileMessagesAreDue(t *testing.T) {
	c, w, ctx := start(t, "kill-leader", 1)
	for i := range 30 {
		msgs := make([]*sundialv1.Message, 5)
		for j := range msgs {
			msgs[j] = &sundialv1.Message{Topic: "kill-leader", Payload: fmt.Appendf(nil, "kill-%d-%d", i, j), DelayMs: int64(1500 + 50*i)}
		}
		w.Publish(ctx, "producer", msgs...)
	}
	ids := published(w)
	if len(ids) < 100 {
		t.Fatalf("%d of 150 publishes answered", len(ids))
	}
	shard := shardOf(t, ids[0])
	leader, err := c.LeaderOf(shard)
	if err != nil || leader == 0 {
		t.Fatalf("LeaderOf(%d) = %d, %v", shard, leader, err)
	}
	time.Sleep(time.Second) // into the window where the messages fall due
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	newLeader(t, c, shard, leader)
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	check(t, w)
}

// TestPausedLeaderPushesNothingAfterCancel freezes the leader of the
// messages' shard (SIGSTOP) past the election timeout, cancels every
// message through the new leader, and resumes the old one after the
// messages' due time: nothing may be received after its cancel was
// answered DONE (G3), though the deposed leader's timers fire on resume.
func TestPausedLeaderPushesNothingAfterCancel(t *testing.T) {
	c, w, ctx := start(t, "paused-leader", 1)
	// Long enough for the election and for the proxy to route around the
	// frozen broker (its routing watch leaves a silent broker after 2 s;
	// before progress frames only keepalive, 10 s + 2 s, ended it) before
	// the messages fall due.
	const delay = 20 * time.Second
	begin := time.Now()
	for i := range 12 {
		msgs := make([]*sundialv1.Message, 5)
		for j := range msgs {
			msgs[j] = &sundialv1.Message{Topic: "paused-leader", Payload: fmt.Appendf(nil, "pause-%d-%d", i, j), DelayMs: delay.Milliseconds()}
		}
		w.Publish(ctx, "producer", msgs...)
	}
	ids := published(w)
	if len(ids) < 40 {
		t.Fatalf("%d of 60 publishes answered", len(ids))
	}
	shard := shardOf(t, ids[0])
	leader, err := c.LeaderOf(shard)
	if err != nil || leader == 0 {
		t.Fatalf("LeaderOf(%d) = %d, %v", shard, leader, err)
	}
	if err := c.Pause(leader); err != nil {
		t.Fatal(err)
	}
	newLeader(t, c, shard, leader)
	// The cancels must reach the new leader: wait until the proxy routes to
	// a reachable leader of every shard (its /readyz), as a client would
	// retry until then.
	framework.WaitFor(t, 30*time.Second, func() error {
		return proc.HTTP200("http://" + c.Proxies[0].HTTPAddr + "/readyz")(ctx)
	})
	// Readiness and routing are one probe round apart: wait until a cancel
	// on the shard is answered, a cancel of an id no entry made, which only
	// a serving leader can answer NOT_FOUND (once, the proxy's routing
	// watch hung on the frozen leader for ~12 s while /readyz said 200:
	// TestRoutingWatchLeavesPausedBroker covers that now).
	probe, err := client.Dial(ctx, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	absent := receipt.NewMessageID(shard, math.MaxUint64, 0).String()
	framework.WaitFor(t, 30*time.Second, func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := probe.Cancel(pctx, client.ByID("paused-leader", absent))
		if status.Code(err) == codes.NotFound {
			return nil // answered: a leader that serves the shard
		}
		return err
	})
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Cancel(ctx, fmt.Sprintf("canceller-%d", i%8), id)
		}()
	}
	wg.Wait()
	done := 0
	for _, op := range w.Recorder().Ops() {
		if op.Kind == history.Cancel && op.Outcome == history.Done {
			done++
		}
	}
	t.Logf("%d of %d cancels answered DONE, %v after the first publish", done, len(ids), time.Since(begin).Round(time.Millisecond))
	time.Sleep(time.Until(begin.Add(delay + time.Second))) // resume after the messages are due
	if err := c.Resume(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	// Give the deposed leader's timers their chance before judging.
	time.Sleep(5 * time.Second)
	check(t, w)
	if done == 0 {
		t.Errorf("no cancel answered DONE: the scenario tested nothing")
	}
}
