package clustertest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
