package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// What an operator sees of a broker that stopped, long before
// dead_node_timeout (5 min here) declares it dead: GetClusterInfo, through
// the proxy and asked of each live broker (the one that does not lead meta
// forwards the call to the meta leader, whose healer probes every node),
// reports it unreachable, then suspect after suspect_node_timeout, with
// the time of its last answer, its state still active; the live brokers
// show as seen since the stop.
func TestStoppedBrokerShownUnreachable(t *testing.T) {
	c := newSuspectCluster(t)
	leader := clusterInfo(t, c).GetMetaLeaderNodeId()
	victim := leader%3 + 1
	asked := map[string]sundialv1.AdminClient{"proxy": c.Admin}
	for id := uint64(1); id <= 3; id++ {
		if id != victim {
			asked[fmt.Sprintf("broker %d", id)] = grpcClient(t, c.Nodes[id-1].Config.GRPCAddr, sundialv1.NewAdminClient)
		}
	}

	Eventually(t, 30*time.Second, func() error {
		return checkLiveness(c.Admin, victim, func(n *sundialv1.Node) error {
			if n.GetLastSeenUnixMs() == 0 || n.GetUnreachable() || n.GetSuspect() {
				return fmt.Errorf("node %d before the stop: last seen %d, unreachable %v, suspect %v; want seen, reachable",
					n.GetNodeId(), n.GetLastSeenUnixMs(), n.GetUnreachable(), n.GetSuspect())
			}
			return nil
		})
	})
	c.StopBroker(int(victim) - 1)
	stopped := time.Now()

	for _, want := range []struct {
		what    string
		suspect bool
	}{{"unreachable", false}, {"suspect", true}} {
		for name, admin := range asked {
			Eventually(t, 60*time.Second, func() error {
				return checkLiveness(admin, victim, func(n *sundialv1.Node) error {
					switch {
					case n.GetNodeId() != victim:
						if n.GetUnreachable() || n.GetSuspect() || time.UnixMilli(n.GetLastSeenUnixMs()).Before(stopped) {
							return fmt.Errorf("%s: live node %d shown unreachable %v, suspect %v, last seen %d (stopped node %d at %d)",
								name, n.GetNodeId(), n.GetUnreachable(), n.GetSuspect(), n.GetLastSeenUnixMs(), victim, stopped.UnixMilli())
						}
					case !n.GetUnreachable() || want.suspect && !n.GetSuspect():
						return fmt.Errorf("%s: stopped node %d shown unreachable %v, suspect %v; want %s", name, victim, n.GetUnreachable(), n.GetSuspect(), want.what)
					case n.GetLastSeenUnixMs() == 0 || time.UnixMilli(n.GetLastSeenUnixMs()).After(stopped):
						return fmt.Errorf("%s: stopped node %d last seen %d, want its last answer before the stop at %d",
							name, victim, n.GetLastSeenUnixMs(), stopped.UnixMilli())
					}
					return nil
				})
			})
			t.Logf("%s shows node %d %s %v after it stopped", name, victim, want.what, time.Since(stopped).Round(time.Millisecond))
		}
	}
}

// checkLiveness asks admin for the cluster and checks every node with
// check; each must still be active, however long victim has been stopped.
func checkLiveness(admin sundialv1.AdminClient, victim uint64, check func(*sundialv1.Node) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil {
		return err
	}
	if len(info.GetNodes()) != 3 {
		return fmt.Errorf("%d nodes, want 3", len(info.GetNodes()))
	}
	for _, n := range info.GetNodes() {
		if n.GetState() != sundialv1.NodeState_NODE_STATE_ACTIVE {
			return fmt.Errorf("node %d is %v, want active (node %d stopped well within dead_node_timeout)", n.GetNodeId(), n.GetState(), victim)
		}
		if err := check(n); err != nil {
			return err
		}
	}
	return nil
}
