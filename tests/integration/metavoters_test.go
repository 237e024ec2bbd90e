package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestMetaGroupGrowsToThreeVoters: a cluster started with one broker that
// grows by two joins ends with three meta voters (the meta leader promotes
// the joined brokers, fewer than 3 voters being live), so stopping the
// first broker, the only voter it started with, leaves a meta group that
// still commits: a CreateTopic through a remaining broker succeeds.
func TestMetaGroupGrowsToThreeVoters(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	for i := 1; i <= 2; i++ {
		cfg := joinConfig(t, c, 0, c.Nodes[0].Config.GRPCAddr)
		c.Nodes = append(c.Nodes, &Node{Config: cfg})
		c.StartBroker(i)
	}
	Eventually(t, 30*time.Second, func() error {
		info := clusterInfo(t, c)
		var voters []uint64
		for _, n := range info.Nodes {
			if n.MetaVoter {
				voters = append(voters, n.NodeId)
			}
		}
		if len(voters) != 3 {
			return fmt.Errorf("meta voters %v, want nodes 1, 2 and 3", voters)
		}
		return nil
	})

	c.StopBroker(0)
	conn, err := grpc.NewClient(c.Nodes[1].Config.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := sundialv1.NewAdminClient(conn)
	Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "after-the-first-broker", Partitions: 1}, IfNotExists: true})
		if err != nil {
			return fmt.Errorf("CreateTopic through node 2 with node 1 stopped: %w", err)
		}
		return nil
	})
}
