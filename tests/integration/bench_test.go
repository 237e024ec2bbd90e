package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// BenchmarkPublish publishes batches of 100 messages of 100 bytes through
// the proxy to 3 brokers with replication factor 3; msgs/s is the figure.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			c := New(b, Config{Shards: 4})
			payload := make([]byte, 100)
			var seq atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					msgs := make([]*sundialv1.Message, batch)
					for i := range msgs {
						msgs[i] = &sundialv1.Message{Topic: fmt.Sprintf("bench-%d", (n+int64(i))%16), Payload: payload, DelayMs: 3_600_000}
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := c.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: msgs})
					cancel()
					if err != nil {
						b.Errorf("Publish() error = %v", err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}

// BenchmarkBurstDrain publishes b.N messages due at once, then measures
// how fast four SDK consumers (prefetch 100) drain them, acking each.
func BenchmarkBurstDrain(b *testing.B) {
	c := New(b, Config{Shards: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, []string{c.Proxy.GRPCAddr()})
	if err != nil {
		b.Fatalf("Dial() error = %v", err)
	}
	defer cl.Close()
	n := max(b.N, 1000)
	pub := cl.NewPublisher(client.PublisherOptions{MaxBatchMessages: 500})
	for i := range n {
		pub.Publish(&sundialv1.Message{Topic: fmt.Sprintf("burst-%d", i%4), Payload: make([]byte, 100)})
	}
	if err := pub.Close(ctx); err != nil {
		b.Fatalf("Publisher.Close() error = %v", err)
	}
	b.ResetTimer()
	start := time.Now()
	var done atomic.Int64
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cl.Subscribe(subCtx, client.SubscribeOptions{Topic: fmt.Sprintf("burst-%d", i), MaxInFlight: 100}, func(ctx context.Context, d *client.Delivery) {
				if d.Ack(ctx) == nil && done.Add(1) == int64(n) {
					stop()
				}
			})
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(done.Load())/time.Since(start).Seconds(), "msgs/s")
}
