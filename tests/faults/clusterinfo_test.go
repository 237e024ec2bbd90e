package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

// TestClusterInfoWhileMetaLeaderPaused: a broker that does not lead meta
// forwards GetClusterInfo to the meta leader (its healer knows who
// answers). Asked right after the meta leader froze (SIGSTOP), it still
// answers within the caller's deadline: the forward to the frozen leader
// takes at most half of it, and the answer then comes from the broker
// itself once another meta leader is elected. Later the new meta leader
// shows the frozen broker unreachable, its state still active.
func TestClusterInfoWhileMetaLeaderPaused(t *testing.T) {
	c, leader, asked := metaLeaderCluster(t)
	admin := dial(t, c.Brokers[asked-1].GRPCAddr).admin

	if err := c.Pause(leader); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Resume(leader) })
	// 18 s: below gRPC's 20 s connect timeout, so an unbounded forward to
	// the frozen leader would use it all; half of it is ample for the
	// election that lets the broker answer itself.
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{}); err != nil {
		t.Fatalf("GetClusterInfo on broker %d right after meta leader %d froze: %v after %v; want an answer within the deadline",
			asked, leader, err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("broker %d answered %v after meta leader %d froze", asked, time.Since(start).Round(time.Millisecond), leader)

	framework.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		for _, n := range info.GetNodes() {
			if n.GetNodeId() != uint64(leader) {
				continue
			}
			if n.GetState() != sundialv1.NodeState_NODE_STATE_ACTIVE || !n.GetUnreachable() {
				return fmt.Errorf("frozen node %d: %v, unreachable %v (meta leader now %d); want active, unreachable",
					leader, n.GetState(), n.GetUnreachable(), info.GetMetaLeaderNodeId())
			}
			return nil
		}
		return fmt.Errorf("frozen node %d not listed", leader)
	})
}
