package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestSDKPublishAndSubscribe drives the Go client SDK against the real
// cluster: 500 messages through the async Publisher over 3 topics' worth of
// shards, all received exactly once by two competing SDK subscribers and
// acked, none delivered before due.
func TestSDKPublishAndSubscribe(t *testing.T) {
	c := New(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, []string{c.Proxy.GRPCAddr()})
	if err != nil {
		t.Fatalf("Dial() error = %v", err)
	}
	defer cl.Close()

	const n = 500
	pub := cl.NewPublisher(client.PublisherOptions{MaxBatchMessages: 50})
	futures := make([]*client.PublishFuture, n)
	for i := range n {
		futures[i] = pub.Publish(&sundialv1.Message{Topic: "sdk", Payload: []byte(fmt.Sprint(i)), DelayMs: int64(i % 500)})
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("Publisher.Close() error = %v", err)
	}
	due := map[string]int64{}
	for i, f := range futures {
		res, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		due[res.MessageId] = res.DueAtUnixMs
	}

	var mu sync.Mutex
	seen := map[string]int{}
	early := 0
	subCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cl.Subscribe(subCtx, client.SubscribeOptions{Topic: "sdk", MaxInFlight: 32}, func(ctx context.Context, d *client.Delivery) {
				now := time.Now().UnixMilli()
				if err := d.Ack(ctx); err != nil {
					t.Errorf("Ack(%s) error = %v", d.MessageId, err)
				}
				mu.Lock()
				defer mu.Unlock()
				seen[d.MessageId]++
				if now < due[d.MessageId] {
					early++
				}
				if len(seen) == n {
					stop()
				}
			})
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("received %d distinct messages, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("message %s delivered %d times to acking consumers", id, k)
		}
	}
	if early != 0 {
		t.Fatalf("%d messages delivered before they were due", early)
	}
}
