package integration

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/ring"
)

// newHeldCluster is a cluster whose brokers keep their cached meta state
// (and so the proxy's routing table) at its current version while the
// returned flag is set: every broker behaves as if its meta replica lagged.
func newHeldCluster(t *testing.T, cfg Config) (*Cluster, *atomic.Bool) {
	t.Helper()
	var hold atomic.Bool
	tune := cfg.Tune
	cfg.Tune = func(bc *broker.Config) {
		if tune != nil {
			tune(bc)
		}
		bc.Testing.HoldMeta = hold.Load
	}
	return New(t, cfg), &hold
}

// routingVersion is the meta routing version broker i (0-based) caches.
func routingVersion(t *testing.T, c *Cluster, i int) float64 {
	t.Helper()
	mfs, err := c.Nodes[i].Metrics.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "sundial_meta_routing_version" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("broker %d has no sundial_meta_routing_version", i+1)
	return 0
}

// waitRoutingPast waits until every broker caches a routing version past v.
func waitRoutingPast(t *testing.T, c *Cluster, v []float64) {
	t.Helper()
	Eventually(t, 20*time.Second, func() error {
		for i := range c.Nodes {
			if got := routingVersion(t, c, i); got <= v[i] {
				return fmt.Errorf("broker %d caches routing version %v, want > %v", i+1, got, v[i])
			}
		}
		return nil
	})
}

func routingVersions(t *testing.T, c *Cluster) []float64 {
	out := make([]float64, len(c.Nodes))
	for i := range c.Nodes {
		out[i] = routingVersion(t, c, i)
	}
	return out
}

// A publish right after CreateTopic(kind=FAIR) reaches a shard leader whose
// cached meta does not know the topic yet: the leader must stamp the
// message FAIR from a linearizable meta read, or the FAIR dispatcher never
// finds it.
func TestFairPublishRightAfterCreateIsDelivered(t *testing.T) {
	c, hold := newHeldCluster(t, Config{Brokers: 1, Shards: 2})
	ctx := ctx10(t)
	before := routingVersions(t, c)
	hold.Store(true)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "jobs", Kind: sundialv1.TopicKind_TOPIC_KIND_FAIR}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	res := publish(t, c, &sundialv1.Message{Topic: "jobs", Payload: []byte("first"), FairnessKey: "tenant-a"})
	// The meta replica catches up; the dispatcher now treats the topic as
	// FAIR and serves it from the fair index.
	hold.Store(false)
	waitRoutingPast(t, c, before)
	sub := c.Subscribe("jobs", "", 10, 0)
	got, ok := sub.Next(15 * time.Second)
	if !ok {
		t.Fatalf("the message published right after CreateTopic(FAIR) was not delivered (stream error %v)", sub.Err())
	}
	if got.MessageId != res[0].MessageId || got.FairnessKey != "tenant-a" {
		t.Fatalf("delivery = %v %q, want %v %q", got.MessageId, got.FairnessKey, res[0].MessageId, "tenant-a")
	}
}

// gauge is the value of the unlabelled gauge name in reg, -1 if absent.
func gauge(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// waitProxyCaughtUp releases nothing: it waits until every broker caches a
// routing version past before and the proxy routes with the newest.
func waitProxyCaughtUp(t *testing.T, c *Cluster, before []float64) {
	t.Helper()
	waitRoutingPast(t, c, before)
	want := 0.0
	for i := range c.Nodes {
		want = max(want, routingVersion(t, c, i))
	}
	Eventually(t, 20*time.Second, func() error {
		if got := gauge(t, c.ProxyMetrics, "sundial_proxy_routing_version"); got < want {
			return fmt.Errorf("proxy routes with version %v, want %v", got, want)
		}
		return nil
	})
}

// A broker refuses a message whose partition does not map to the shard, or
// is past the topic's partition count, with WrongShard and the routing
// version, instead of storing it where no reader or key lookup finds it.
func TestBrokerRefusesMisplacedMessages(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 4})
	ctx := ctx10(t)
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "placed", Partitions: 2}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	conn, err := grpc.NewClient(c.Nodes[0].Server.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial broker: %v", err)
	}
	defer conn.Close()
	shard := brokerv1.NewShardClient(conn)
	pub := func(id uint64, partition uint32) error {
		_, err := shard.Publish(ctx, &brokerv1.ShardPublishRequest{
			ShardId: id, RequestId: fmt.Sprintf("misplaced-%d-%d", id, partition),
			Messages: []*brokerv1.PartitionedMessage{{Message: &sundialv1.Message{Topic: "placed", Payload: []byte("x")}, Partition: partition}},
		})
		return err
	}
	accepted := 0
	for id := uint64(100); id < 104; id++ {
		err := pub(id, 0)
		if err == nil {
			accepted++
			continue
		}
		if ws, ok := apierr.AsWrongShard(err); !ok || ws.GetRoutingVersion() == 0 {
			t.Errorf("Publish(shard %d, partition 0) error = %v, want WrongShard with the routing version", id, err)
		}
	}
	if accepted != 1 {
		t.Errorf("%d shards accepted partition 0, want exactly the one the ring maps it to", accepted)
	}
	for id := uint64(100); id < 104; id++ {
		if _, ok := apierr.AsWrongShard(pub(id, 2)); !ok {
			t.Errorf("Publish(shard %d, partition 2 of a 2-partition topic) was not refused with WrongShard", id)
		}
	}

	// A keyed message belongs to its key's partition, and a keyed cancel
	// to that partition's shard.
	r := ring.New([]uint64{100, 101, 102, 103})
	const key = "order-1"
	right := ring.KeyPartition(key, 2)
	wrong := 1 - right
	_, err = shard.Publish(ctx, &brokerv1.ShardPublishRequest{
		ShardId: r.Locate("placed", wrong), RequestId: "misplaced-key",
		Messages: []*brokerv1.PartitionedMessage{{Message: &sundialv1.Message{Topic: "placed", Key: key, Payload: []byte("x")}, Partition: wrong}},
	})
	if ws, ok := apierr.AsWrongShard(err); !ok || ws.GetTopic() != "placed" {
		t.Errorf("Publish(key %q on partition %d, its key partition is %d) error = %v, want WrongShard naming the topic", key, wrong, right, err)
	}
	for id := uint64(100); id < 104; id++ {
		_, err := shard.Cancel(ctx, &brokerv1.ShardChangeRequest{ShardId: id, Partition: right, Message: &sundialv1.MessageSelector{Topic: "placed", By: &sundialv1.MessageSelector_Key{Key: key}}})
		_, refused := apierr.AsWrongShard(err)
		if owner := r.Locate("placed", right); (id != owner) != refused {
			t.Errorf("Cancel(key %q) at shard %d (the key's shard is %d) error = %v", key, id, owner, err)
		}
	}
}
