package faults

import (
	"testing"

	"github.com/sundialmq/sundial/tests/framework"
)

// metaLeaderCluster starts 3 brokers (2 shards) and a proxy and answers
// the cluster, its meta leader and a broker that does not lead meta: the
// set-up of the tests that freeze one of the two.
func metaLeaderCluster(t *testing.T) (c *framework.Cluster, leader, other int) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	c = framework.NewCluster(t, framework.Config{Shards: 2, LogLevel: "warn"})
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	leader = int(info.GetMetaLeaderNodeId())
	if leader == 0 {
		t.Fatal("no meta leader")
	}
	return c, leader, leader%3 + 1
}
