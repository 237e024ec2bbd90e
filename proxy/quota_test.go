package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/frame"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func messages(topic string, n int) *sundialv1.PublishRequest {
	req := &sundialv1.PublishRequest{}
	for range n {
		req.Messages = append(req.Messages, &sundialv1.Message{Topic: topic, Payload: []byte("x")})
	}
	return req
}

// A principal over its publish rate is refused ResourceExhausted with a
// RetryInfo over gRPC (the SDK's classifier says retry) and 429 with
// Retry-After over HTTP; nothing of the refused publish is forwarded.
func TestPublishOverTheRateIsRefusedWithRetryInfo(t *testing.T) {
	srv, leader, conn := startClusterWith(t, nil, func(c *Config) {
		c.Quotas.PublishRate, c.Quotas.PublishBurst = 0.01, 5 // no refill within the test
	})
	p := sundialv1.NewProducerClient(conn)
	if _, err := p.Publish(t.Context(), messages("wide", 5)); err != nil {
		t.Fatalf("a burst of 5: %v", err)
	}
	published := func() int {
		leader.mu.Lock()
		defer leader.mu.Unlock()
		n := 0
		for _, c := range leader.published {
			n += c
		}
		return n
	}
	before := published()
	_, err := p.Publish(t.Context(), messages("wide", 1))
	if status.Code(err) != codes.ResourceExhausted || apierr.Classify(err) != apierr.Retry {
		t.Fatalf("publish over the rate: %v, want ResourceExhausted the SDK retries", err)
	}
	if got := published(); got != before {
		t.Fatalf("a refused publish reached the shards: %d messages, want %d", got, before)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+srv.HTTPAddr()+"/v1/topics/wide/messages", strings.NewReader(`{"messages":[{"payload":"eA=="}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("HTTP publish over the rate = %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// Publishing to topics that do not exist creates them; a principal may
// do that only so many times a minute. Publishes to existing topics are
// not counted.
func TestTopicsCreatedByPublishingAreLimited(t *testing.T) {
	_, _, conn := startClusterWith(t, nil, func(c *Config) { c.Quotas.TopicCreatesPerMinute = 1 })
	p := sundialv1.NewProducerClient(conn)
	if _, err := p.Publish(t.Context(), messages("missing", 1)); err != nil {
		t.Fatalf("first publish to a new topic: %v", err)
	}
	_, err := p.Publish(t.Context(), messages("missing", 1))
	if status.Code(err) != codes.ResourceExhausted || apierr.Classify(err) != apierr.Retry {
		t.Fatalf("a second topic creation within the minute: %v, want a retryable ResourceExhausted", err)
	}
	for range 3 {
		if _, err := p.Publish(t.Context(), messages("wide", 1)); err != nil {
			t.Fatalf("publish to an existing topic: %v", err)
		}
	}
}

// A Subscribe stream over its principal's receive rate is paced, not
// ended: the client's credit reaches the shards as the bucket refills, so
// deliveries arrive at the rate (and nothing is leased that cannot go out).
func TestSubscribeIsPacedToTheReceiveRate(t *testing.T) {
	_, _, conn := startClusterWith(t, nil, func(c *Config) {
		c.Quotas.ReceiveRate, c.Quotas.ReceiveBurst = 20, 10
	})
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide", MaxInFlight: 1000}}}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	got := 0
	for got < 30 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d deliveries: %v", got, err)
		}
		got += len(frame.Deliveries(resp))
	}
	// However slow the machine, the bucket bounds what arrived: a burst
	// of 10, then 20 a second (with one grant of slack).
	if bound := 10 + int(20*time.Since(began).Seconds()) + 10; got > bound {
		t.Fatalf("%d deliveries in %v at 20/s with a burst of 10, want at most %d", got, time.Since(began), bound)
	}
}

// A first Receive or Subscribe on a group the topic does not have creates
// it; a principal may do that only so many times a minute. Groups that
// exist are not counted.
func TestGroupsCreatedByReadingAreLimited(t *testing.T) {
	_, _, conn := startClusterWith(t, nil, func(c *Config) { c.Quotas.GroupCreatesPerMinute = 1 })
	cons := sundialv1.NewConsumerClient(conn)
	receive := func(group string) error {
		_, err := cons.Receive(t.Context(), &sundialv1.ReceiveRequest{Topic: "wide", Group: group, MaxMessages: 1})
		return err
	}
	if err := receive("fresh"); status.Code(err) == codes.ResourceExhausted {
		t.Fatalf("the first new group: %v", err)
	}
	if err := receive("another"); status.Code(err) != codes.ResourceExhausted || apierr.Classify(err) != apierr.Retry {
		t.Fatalf("a second new group within the minute by Receive: %v, want a retryable ResourceExhausted", err)
	}
	st, err := cons.Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide", Group: "third", MaxInFlight: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a new group by Subscribe past the limit: %v, want ResourceExhausted", err)
	}
	for range 3 {
		if err := receive("billing"); status.Code(err) == codes.ResourceExhausted {
			t.Fatalf("a Receive on an existing group was limited: %v", err)
		}
	}
}
