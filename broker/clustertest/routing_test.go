package clustertest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
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
