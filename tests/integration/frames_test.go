package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/frame"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// dueTogether publishes n messages on topic due at the same instant, far
// enough ahead that every subscriber holds its credit by then.
func dueTogether(t *testing.T, c *Cluster, topic string, n int) map[string]bool {
	t.Helper()
	at := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	msgs := make([]*sundialv1.Message, n)
	for i := range msgs {
		msgs[i] = &sundialv1.Message{Topic: topic, Payload: fmt.Appendf(nil, "m%d", i), DeliverAtUnixMs: at}
	}
	ids := map[string]bool{}
	for _, r := range publish(t, c, msgs...) {
		ids[r.MessageId] = true
	}
	return ids
}

// takeOnce takes n deliveries from sub, failing on a duplicate, an early
// delivery or one not in ids.
func takeOnce(t *testing.T, sub *Subscriber, ids, seen map[string]bool, n int) {
	t.Helper()
	for range n {
		got, ok := sub.Next(15 * time.Second)
		if !ok {
			t.Fatalf("%d of %d deliveries within 15s (stream error %v)", len(seen), len(ids), sub.Err())
		}
		if !ids[got.MessageId] || seen[got.MessageId] {
			t.Fatalf("delivery of %s: unknown or delivered twice", got.MessageId)
		}
		if got.At.UnixMilli() < got.DueAtUnixMs {
			t.Fatalf("%s delivered at %d, before its due time %d", got.MessageId, got.At.UnixMilli(), got.DueAtUnixMs)
		}
		seen[got.MessageId] = true
	}
}

// histCount is the sample count of the unlabelled histogram name in reg.
func histCount(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestSubscribeFrames: several deliveries due at once reach a client that
// asked for batches in few frames, each once, within its exact credit; a
// client that did not ask (an old client) still gets one per frame.
func TestSubscribeFrames(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})

	t.Run("old client gets one delivery per frame", func(t *testing.T) {
		sub := c.Subscribe("frames-old", "", 50, 0)
		ids := dueTogether(t, c, "frames-old", 20)
		seen := map[string]bool{}
		takeOnce(t, sub, ids, seen, 20)
		for i, n := range sub.Frames() {
			if n != 0 {
				t.Fatalf("frame %d carried %d deliveries in a Deliveries frame, want a Delivery frame each (frames %v)", i, n, sub.Frames())
			}
		}
	})

	t.Run("batching client gets several per frame within its credit", func(t *testing.T) {
		lateBefore := histCount(t, c.ProxyMetrics, "sundial_proxy_delivery_lateness_seconds")
		sub := c.SubscribeStart(&sundialv1.Start{Topic: "frames-new", MaxInFlight: 15, MaxDeliveriesPerFrame: 100})
		ids := dueTogether(t, c, "frames-new", 40)
		seen := map[string]bool{}
		takeOnce(t, sub, ids, seen, 15)
		if extra, ok := sub.Next(1500 * time.Millisecond); ok {
			t.Fatalf("delivery %s beyond the credit of 15", extra.MessageId)
		}
		sub.Credit(25)
		takeOnce(t, sub, ids, seen, 25)
		if extra, ok := sub.Next(1500 * time.Millisecond); ok {
			t.Fatalf("delivery %s beyond the 40 published", extra.MessageId)
		}
		frames := sub.Frames()
		batched := 0
		for _, n := range frames {
			if n > 25 {
				t.Fatalf("a frame carried %d deliveries, more than any credit held (frames %v)", n, frames)
			}
			if n > 1 {
				batched++
			}
		}
		if batched == 0 || len(frames) >= 40 {
			t.Fatalf("frames %v: want several deliveries per frame for 40 due at once", frames)
		}
		// Lateness is still one observation per first delivery.
		if got := histCount(t, c.ProxyMetrics, "sundial_proxy_delivery_lateness_seconds") - lateBefore; got != 40 {
			t.Fatalf("proxy lateness observations = %d for 40 first deliveries, want 40", got)
		}
		t.Logf("40 deliveries in frames %v", frames)
	})

	t.Run("broker sends one delivery per frame unless asked", func(t *testing.T) {
		conn, err := grpc.NewClient(c.Nodes[0].Server.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatalf("dial broker: %v", err)
		}
		defer conn.Close()
		for _, tc := range []struct {
			topic    string
			perFrame int32
			batched  bool
		}{{"frames-shard-old", 0, false}, {"frames-shard-new", 100, true}} {
			ids := dueTogether(t, c, tc.topic, 10)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			st, err := brokerv1.NewShardClient(conn).Subscribe(ctx)
			if err != nil {
				cancel()
				t.Fatalf("Shard.Subscribe() error = %v", err)
			}
			start := &brokerv1.ShardStart{ShardId: meta.FirstEventShard, Topic: tc.topic, Partitions: []uint32{0}, Credit: 50, MaxDeliveriesPerFrame: tc.perFrame}
			if err := st.Send(&brokerv1.ShardSubscribeRequest{Kind: &brokerv1.ShardSubscribeRequest_Start{Start: start}}); err != nil {
				cancel()
				t.Fatalf("send start: %v", err)
			}
			var frames []int
			seen := map[string]bool{}
			for len(seen) < len(ids) {
				resp, err := st.Recv()
				if err != nil {
					cancel()
					t.Fatalf("%s: Recv() after %d deliveries = %v", tc.topic, len(seen), err)
				}
				ds := frame.Deliveries(resp)
				if resp.GetDeliveries() != nil {
					frames = append(frames, len(ds))
				} else {
					frames = append(frames, 0)
				}
				for _, d := range ds {
					if !ids[d.GetMessageId()] || seen[d.GetMessageId()] {
						cancel()
						t.Fatalf("%s: delivery of %s unknown or twice", tc.topic, d.GetMessageId())
					}
					seen[d.GetMessageId()] = true
				}
			}
			cancel()
			batched := slices.ContainsFunc(frames, func(n int) bool { return n > 1 })
			if batched != tc.batched || !tc.batched && slices.ContainsFunc(frames, func(n int) bool { return n != 0 }) {
				t.Errorf("%s with max_deliveries_per_frame %d: frames %v (0: a Delivery frame), want batched %v", tc.topic, tc.perFrame, frames, tc.batched)
			}
		}
	})

	t.Run("client frame size is respected", func(t *testing.T) {
		sub := c.SubscribeStart(&sundialv1.Start{Topic: "frames-small", MaxInFlight: 50, MaxDeliveriesPerFrame: 4})
		ids := dueTogether(t, c, "frames-small", 20)
		seen := map[string]bool{}
		takeOnce(t, sub, ids, seen, 20)
		frames := sub.Frames()
		batched := 0
		for _, n := range frames {
			if n > 4 {
				t.Fatalf("a frame carried %d deliveries, want at most 4 (frames %v)", n, frames)
			}
			if n > 1 {
				batched++
			}
		}
		if batched == 0 {
			t.Fatalf("frames %v: want frames of up to 4 for 20 due at once", frames)
		}
	})
}
