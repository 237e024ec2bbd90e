package moves

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sundialmq/sundial/tests/framework"
)

// TestMoveReplannedWhileTargetDown is chaos finding A's sequence
// (docs/reliability.md) on processes: the moves of a rebalance onto a
// joined broker have started their learners there when the broker is
// killed; the moves roll back at wait-catch-up, and a second rebalance,
// while the broker is still down, plans moves onto it again (new replica
// ids). Restarted on its data, whose meta log still places the first
// learners, the broker must run the replicas placed now: the second moves
// end done, every broker is ready, the replicas agree (no "shard not
// found") and no message is lost or early.
func TestMoveReplannedWhileTargetDown(t *testing.T) {
	const topic = "replanned"
	// The planner must still name the down broker, as it would one that
	// is behind: keep the meta leader from judging it suspect (3 s unheard
	// by default). The brokers inherit it.
	t.Setenv("SUNDIAL_SUSPECT_NODE_TIMEOUT", "1h")
	c, w, cl, ctx := start(t, 3, 4, 25*time.Second, topic)
	publishPending(ctx, t, w, topic, 2000, 30*time.Second, 15*time.Second)
	target, err := c.Join(90 * time.Second)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	// Slow everything sent to the target (the meta log, the snapshots, the
	// read index answers) so its learners start but none catches up before
	// the kill.
	c.Slow(target, 2*time.Second)
	first := submit(t, cl)
	shards := map[uint64]bool{}
	for _, op := range operations(t, cl) {
		if first[op.GetOperationId()] && op.GetToNodeId() == uint64(target) {
			shards[op.GetShardId()] = true
		}
	}
	if len(shards) == 0 {
		t.Fatalf("the first rebalance moved nothing onto broker-%d: %v", target, first)
	}
	framework.WaitFor(t, 60*time.Second, func() error {
		hashes := c.StateHashes()
		for s := range shards {
			if _, ok := hashes[strconv.FormatUint(s, 10)][target]; !ok {
				return fmt.Errorf("broker-%d does not host shard %d yet", target, s)
			}
		}
		return nil
	})
	if err := c.Kill(target); err != nil {
		t.Fatal(err)
	}
	c.Heal()
	t.Logf("killed broker-%d hosting the learners of shards %v", target, slices.Sorted(maps.Keys(shards)))

	rolledBack := map[uint64]bool{}
	framework.WaitFor(t, 90*time.Second, func() error {
		for _, op := range operations(t, cl) {
			if !first[op.GetOperationId()] {
				continue
			}
			switch op.GetStatus() {
			case "pending", "running":
				return fmt.Errorf("operation %d %s at step %d", op.GetOperationId(), op.GetStatus(), op.GetCurrentStep())
			case "rolled-back":
				rolledBack[op.GetShardId()] = true
			}
		}
		return nil
	})
	if len(rolledBack) == 0 {
		t.Fatalf("no move onto broker-%d rolled back (its learners caught up before the kill)", target)
	}

	// The target is still down: the next plan moves replicas onto it again.
	second := submit(t, cl)
	replanned := map[uint64]bool{}
	framework.WaitFor(t, 60*time.Second, func() error {
		for _, op := range operations(t, cl) {
			if !second[op.GetOperationId()] || op.GetToNodeId() != uint64(target) {
				continue
			}
			if op.GetStatus() == "pending" || (op.GetStatus() == "running" && op.GetCurrentStep() < 1) {
				return fmt.Errorf("operation %d %s at step %d, want its learner added", op.GetOperationId(), op.GetStatus(), op.GetCurrentStep())
			}
			if rolledBack[op.GetShardId()] {
				replanned[op.GetShardId()] = true
			}
		}
		return nil
	})
	if len(replanned) == 0 {
		t.Fatalf("the second rebalance moved none of the rolled-back shards %v onto broker-%d again", slices.Sorted(maps.Keys(rolledBack)), target)
	}
	t.Logf("shards %v planned onto broker-%d again while it is down", slices.Sorted(maps.Keys(replanned)), target)
	if err := c.Restart(target); err != nil {
		t.Fatal(err)
	}
	// Every later operation ends done: a move whose new learner never runs
	// on the target rolls back at wait-catch-up, and rebalance fails then.
	rebalance(t, cl, 3*time.Minute, first)
	if err := c.WaitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, 60*time.Second, c.ReplicasAgree)
	framework.WaitFor(t, 30*time.Second, func() error {
		_, _, err := spread(cl, nodeIDs(4))
		return err
	})
	check(t, w, 2*time.Minute)
}
