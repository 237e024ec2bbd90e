package faults

import (
	"context"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestReadsThroughProxyWhileBrokerPaused: with one broker frozen (SIGSTOP:
// its port still accepts, the proxy's channel to it stays open), the
// reads the proxy sends to any broker (GetClusterInfo, ListTopics,
// ListShards) keep answering, though the proxy's round robin starts some of
// them at the frozen broker: a read moves on to the next broker after its
// per-try deadline, and the frozen broker is tried last afterwards.
// Before that, a call that picked it waited out the forward timeout and
// answered Unavailable "no broker reachable".
func TestReadsThroughProxyWhileBrokerPaused(t *testing.T) {
	// Freeze a broker that does not lead meta, so the others answer
	// without waiting for an election.
	c, _, victim := metaLeaderCluster(t)
	cl := dial(t, c.Proxies[0].GRPCAddr)
	admin, cluster := cl.admin, cl.cluster

	if err := c.Pause(victim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Resume(victim) })
	reads := []struct {
		name string
		call func(context.Context) error
	}{
		{"GetClusterInfo", func(ctx context.Context) error {
			_, err := admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
			return err
		}},
		{"ListTopics", func(ctx context.Context) error {
			_, err := admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{})
			return err
		}},
		{"ListShards", func(ctx context.Context) error {
			_, err := cluster.ListShards(ctx, &sundialv1.ListShardsRequest{})
			return err
		}},
	}
	// Two rounds of three calls over three brokers: the round robin starts
	// at least one of them at the frozen broker.
	for round := range 2 {
		for _, r := range reads {
			// 30 s: more than the proxy's forward timeout (10 s), so the
			// proxy's answer, not the client's deadline, ends the call.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			err := r.call(ctx)
			cancel()
			if err != nil {
				t.Fatalf("round %d: %s through the proxy with broker %d frozen: %v after %v; want an answer from a live broker",
					round, r.name, victim, err, time.Since(start).Round(time.Millisecond))
			}
			t.Logf("round %d: %s answered after %v", round, r.name, time.Since(start).Round(time.Millisecond))
		}
	}
}
