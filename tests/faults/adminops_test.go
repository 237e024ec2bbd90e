package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/ring"
	"github.com/sundialmq/sundial/tests/framework"
)

// adminClients are the public clients over one gRPC connection.
type adminClients struct {
	admin    sundialv1.AdminClient
	cluster  sundialv1.ClusterClient
	producer sundialv1.ProducerClient
	consumer sundialv1.ConsumerClient
}

func dial(t *testing.T, addr string) adminClients {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminClients{sundialv1.NewAdminClient(conn), sundialv1.NewClusterClient(conn), sundialv1.NewProducerClient(conn), sundialv1.NewConsumerClient(conn)}
}

const adminPartitions = 8

// stallFirstStep makes the next admin operation on topic stall on its
// first step until killMetaLeaderMidway heals it: it moves the leadership
// of the lowest shard holding the topic's partitions (the executor's first
// step) off the meta leader, then partitions the meta leader from that
// shard's leader. The shard keeps its leader (it and the third broker are
// a quorum, and the third drops the votes of the cut-off follower while it
// hears the leader), so the executor's Shard.Group calls find no leader
// they can reach and the step retries until the partition ends; the meta
// group keeps its leader and the third broker as a quorum.
//
// A pause of the shard's leader does not stall the step: the two other
// replicas elect a new leader within an election timeout (300-600 ms) and
// the executor, polling every 500 ms, reaches the new leader, so the
// operation completed within the 2 s deadline on some runs.
//
// It answers the meta leader.
func stallFirstStep(t *testing.T, c *framework.Cluster, topic string) (metaLeader int) {
	t.Helper()
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	metaLeader = int(info.GetMetaLeaderNodeId())
	cut := 0
	var ids []uint64
	for _, s := range info.GetShards() {
		ids = append(ids, s.GetShardId())
	}
	r := ring.New(ids)
	first := uint64(0)
	for p := range uint32(adminPartitions) {
		if s := r.Locate(topic, p); first == 0 || s < first {
			first = s
		}
	}
	framework.WaitFor(t, 60*time.Second, func() error {
		leader, err := c.LeaderOf(first)
		if err != nil || leader == 0 {
			return fmt.Errorf("shard %d has no leader yet (%w)", first, err)
		}
		if leader != metaLeader {
			// Every broker must see this meta leader and shard leader
			// itself: the proxy's broker may not have seen the transfer
			// yet, and a third broker not hearing from the meta leader
			// would leave it without a quorum once it is cut off.
			if err := leadersSeenByAll(c, metaLeader, first, leader); err != nil {
				return err
			}
			cut = leader
			return nil
		}
		to := 0
		for _, b := range c.Brokers {
			if b.ID != metaLeader && c.Running(b.ID) {
				to = b.ID
			}
		}
		if _, _, err := c.TransferLeader(context.Background(), first, to); err != nil {
			return err
		}
		return fmt.Errorf("shard %d still led by the meta leader %d", first, leader)
	})
	c.Partition(metaLeader, cut)
	t.Logf("meta leader %d; partitioned from broker %d, leader of shard %d (the first step's)", metaLeader, cut, first)
	return metaLeader
}

// leadersSeenByAll checks that every running broker names metaLeader as
// the meta leader and leader as shard's leader in its own view.
func leadersSeenByAll(c *framework.Cluster, metaLeader int, shard uint64, leader int) error {
	for _, b := range c.Brokers {
		if !c.Running(b.ID) {
			continue
		}
		m, l, err := leadersSeenBy(b.GRPCAddr, shard)
		if err != nil {
			return fmt.Errorf("broker %d: %w", b.ID, err)
		}
		if m != metaLeader || l != leader {
			return fmt.Errorf("broker %d sees meta leader %d and shard %d led by %d, want %d and %d", b.ID, m, shard, l, metaLeader, leader)
		}
	}
	return nil
}

// leadersSeenBy answers the meta leader and shard's leader the broker at
// addr sees.
func leadersSeenBy(addr string, shard uint64) (metaLeader, leader int, err error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil {
		return 0, 0, err
	}
	for _, s := range info.GetShards() {
		if s.GetShardId() == shard {
			return int(info.GetMetaLeaderNodeId()), int(s.GetLeaderNodeId()), nil
		}
	}
	return 0, 0, fmt.Errorf("no shard %d", shard)
}

// killMetaLeaderMidway kills the meta leader while the admin operation of
// kind on topic is unfinished, then heals the partition stallFirstStep
// made (the two live brokers are the meta quorum) and answers the
// operation's id.
func killMetaLeaderMidway(t *testing.T, c *framework.Cluster, via adminClients, metaLeader int, kind, topic string) uint64 {
	t.Helper()
	var id uint64
	framework.WaitFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ops, err := via.cluster.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		if err != nil {
			return err
		}
		for _, op := range ops.GetOperations() {
			if op.GetKind() == kind && op.GetReason() == "topic "+topic+groupSuffix(kind) {
				id = op.GetOperationId()
				if op.GetStatus() == "done" {
					t.Errorf("%s of %s is done before the fault (current step %d): the scenario tests less than it should", kind, topic, op.GetCurrentStep())
				}
				return nil
			}
		}
		return fmt.Errorf("no %s operation of %s stored: %v", kind, topic, ops)
	})
	if err := c.Kill(metaLeader); err != nil {
		t.Fatal(err)
	}
	c.Heal()
	return id
}

func groupSuffix(kind string) string {
	if kind == "create-group" {
		return " group billing"
	}
	return ""
}

// submitStalled sends call (an admin request with a 2s deadline) to a
// broker until it answers DeadlineExceeded: the operation is stored and
// stalled. Unavailable (the meta group settling after a restart) is sent
// again.
func submitStalled(t *testing.T, what string, call func(ctx context.Context) error) {
	t.Helper()
	framework.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := call(ctx)
		switch status.Code(err) {
		case codes.DeadlineExceeded:
			return nil
		case codes.Unavailable:
			return err
		}
		t.Fatalf("%s(2s, the shard leader cut off) = %v, want DeadlineExceeded while the operation runs", what, err)
		return nil
	})
}

// waitDone polls until operation id is done, and checks it is the only
// operation of kind: nothing started a second one.
func waitDone(t *testing.T, via adminClients, kind string, id uint64) {
	t.Helper()
	framework.WaitFor(t, 90*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ops, err := via.cluster.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		if err != nil {
			return err
		}
		var got []string
		for _, op := range ops.GetOperations() {
			if op.GetKind() == kind {
				got = append(got, fmt.Sprintf("%d:%s", op.GetOperationId(), op.GetStatus()))
			}
		}
		if want := []string{fmt.Sprintf("%d:done", id)}; !slices.Equal(got, want) {
			return fmt.Errorf("%s operations = %v, want %v", kind, got, want)
		}
		return nil
	})
}

// publishEveryPartition publishes keyed messages until each of the
// topic's partitions has two, and answers their ids.
func publishEveryPartition(t *testing.T, cl adminClients, topic, tag string) []string {
	t.Helper()
	perPart := map[uint32]int{}
	var msgs []*sundialv1.Message
	for i := 0; len(perPart) < adminPartitions || slices.Min(countsOf(perPart)) < 2; i++ {
		key := fmt.Sprintf("%s-%d", tag, i)
		p := ring.KeyPartition(key, adminPartitions)
		if perPart[p] >= 2 {
			continue
		}
		perPart[p]++
		msgs = append(msgs, &sundialv1.Message{Topic: topic, Key: key, Payload: []byte(key)})
	}
	var ids []string
	framework.WaitFor(t, 60*time.Second, func() error {
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.producer.Publish(pctx, &sundialv1.PublishRequest{RequestId: "admin-" + tag, Messages: msgs})
		if err != nil {
			return err
		}
		ids = ids[:0]
		for _, r := range resp.GetResults() {
			if r.GetError() != nil && r.GetError().GetCode() != 0 {
				return fmt.Errorf("publish %s: %v", r.GetMessageId(), r.GetError())
			}
			ids = append(ids, r.GetMessageId())
		}
		return nil
	})
	return ids
}

func countsOf(m map[uint32]int) []int {
	var out []int
	for _, n := range m {
		out = append(out, n)
	}
	return out
}

// receiveAll pulls group's deliveries until every id in want arrived.
func receiveAll(t *testing.T, cl adminClients, topic, group string, want []string) {
	t.Helper()
	got := map[string]bool{}
	framework.WaitFor(t, 60*time.Second, func() error {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cl.consumer.Receive(rctx, &sundialv1.ReceiveRequest{Topic: topic, Group: group, MaxMessages: 100, WaitMs: 1000})
		if err != nil {
			return err
		}
		for _, d := range resp.GetDeliveries() {
			got[d.GetMessageId()] = true
		}
		var missing []string
		for _, id := range want {
			if !got[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("group %s has not received %d of %d messages: %v", group, len(missing), len(want), missing)
		}
		return nil
	})
}

// startAdminCluster starts 3 brokers with 4 shards and a proxy, and
// answers the clients of the proxy.
func startAdminCluster(t *testing.T) (*framework.Cluster, adminClients) {
	t.Helper()
	c := framework.NewCluster(t, framework.Config{Shards: 4, LogLevel: "warn"})
	return c, dial(t, c.Proxies[0].GRPCAddr)
}

// createTopic creates topic name with adminPartitions partitions.
func createTopic(t *testing.T, proxy adminClients, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := proxy.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: name, Partitions: adminPartitions}}); err != nil {
		t.Fatalf("CreateTopic(%s) = %v", name, err)
	}
}

// Admin operations run by the executor on the meta leader complete through
// a shard leader cut off from the meta leader and a killed meta leader:
// CreateGroup ends with the group registered on every shard (a message published afterwards on any
// partition has a copy for it), DeleteTopic with the topic gone everywhere
// and creatable afresh; each ends as one operation (the unit tests in
// broker/internal/service show a retried request waiting on it).
func TestAdminOperationsSurviveFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	// Each subtest starts its own cluster: a broker the previous one
	// restarted may not hear from the others yet, and the partition leaves
	// the third broker as the only link of both quorums.
	t.Run("create-group", func(t *testing.T) {
		c, proxy := startAdminCluster(t)
		createTopic(t, proxy, "fanout")
		metaLeader := stallFirstStep(t, c, "fanout")
		viaMeta := dial(t, c.Brokers[metaLeader-1].GRPCAddr) // not the proxy: it may pick a broker the meta leader is cut off from
		submitStalled(t, "CreateGroup", func(ctx context.Context) error {
			_, err := viaMeta.admin.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "fanout", Group: "billing"})
			return err
		})
		id := killMetaLeaderMidway(t, c, viaMeta, metaLeader, "create-group", "fanout")
		waitDone(t, proxy, "create-group", id)
		if err := c.Restart(metaLeader); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		ids := publishEveryPartition(t, proxy, "fanout", "after")
		receiveAll(t, proxy, "fanout", "billing", ids)
		receiveAll(t, proxy, "fanout", "default", ids)
	})

	t.Run("delete-topic", func(t *testing.T) {
		c, proxy := startAdminCluster(t)
		createTopic(t, proxy, "doomed")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := proxy.admin.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "doomed", Group: "g2"}); err != nil {
			t.Fatalf("CreateGroup(doomed/g2) = %v", err)
		}
		for i := range 16 {
			if _, err := proxy.producer.Publish(ctx, &sundialv1.PublishRequest{Messages: []*sundialv1.Message{
				{Topic: "doomed", Key: fmt.Sprintf("old-%d", i), Payload: []byte("old"), DelayMs: time.Hour.Milliseconds()},
			}}); err != nil {
				t.Fatalf("Publish(doomed) = %v", err)
			}
		}
		metaLeader := stallFirstStep(t, c, "doomed")
		viaMeta := dial(t, c.Brokers[metaLeader-1].GRPCAddr) // not the proxy: it may pick a broker the meta leader is cut off from
		submitStalled(t, "DeleteTopic", func(ctx context.Context) error {
			_, err := viaMeta.admin.DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: "doomed"})
			return err
		})
		framework.WaitFor(t, 20*time.Second, func() error {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := viaMeta.admin.CreateTopic(cctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "doomed"}, IfNotExists: true})
			if status.Code(err) == codes.Unavailable {
				return err
			}
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("CreateTopic(while being deleted) = %v, want FailedPrecondition", err)
			}
			return nil
		})
		id := killMetaLeaderMidway(t, c, viaMeta, metaLeader, "delete-topic", "doomed")
		waitDone(t, proxy, "delete-topic", id)
		if err := c.Restart(metaLeader); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
		createTopic(t, proxy, "doomed")
		framework.WaitFor(t, 60*time.Second, func() error {
			tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			topic, err := proxy.admin.GetTopic(tctx, &sundialv1.GetTopicRequest{Name: "doomed"})
			if err != nil {
				return err
			}
			if !slices.Equal(topic.GetGroups(), []string{"default"}) {
				t.Fatalf("groups of the topic created afresh = %v, want [default]", topic.GetGroups())
			}
			for _, s := range topic.GetStats() {
				if s.GetScheduled() != 0 || s.GetReady() != 0 || s.GetGroup() != "default" {
					t.Fatalf("stats of the topic created afresh: %v, want nothing of the old topic on any shard", s)
				}
			}
			return nil
		})
		ids := publishEveryPartition(t, proxy, "doomed", "fresh")
		receiveAll(t, proxy, "doomed", "default", ids)
	})
}
