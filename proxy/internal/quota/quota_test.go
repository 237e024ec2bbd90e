package quota

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
)

// clocked is a limiter on a clock the test moves.
func clocked(cfg Config) (*Limiter, *time.Time) {
	l := New(cfg, prometheus.NewRegistry())
	now := time.Unix(1_000_000, 0)
	l.now = func() time.Time { return now }
	return l, &now
}

func TestPublishRate(t *testing.T) {
	l, now := clocked(Config{PublishRate: 10, PublishBurst: 20})
	ctx := context.Background()
	if err := l.Publish(ctx, "token:a", 20, 0); err != nil {
		t.Fatalf("a full burst: %v", err)
	}
	err := l.Publish(ctx, "token:a", 5, 0)
	if status.Code(err) != codes.ResourceExhausted || apierr.Classify(err) != apierr.Retry {
		t.Fatalf("over the rate: %v (class %v), want ResourceExhausted with RetryInfo (retry)", err, apierr.Classify(err))
	}
	// Another principal has its own bucket.
	if err := l.Publish(ctx, "token:b", 20, 0); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	// Half a second refills 5.
	*now = now.Add(500 * time.Millisecond)
	if err := l.Publish(ctx, "token:a", 5, 0); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
	// A refused publish spends nothing: after 100ms one message fits
	// however many refusals came before.
	for range 5 {
		_ = l.Publish(ctx, "token:a", 1, 0)
	}
	*now = now.Add(100 * time.Millisecond)
	if err := l.Publish(ctx, "token:a", 1, 0); err != nil {
		t.Fatalf("refusals spent tokens: %v", err)
	}
	// More than a burst at once can never pass: refused for good.
	err = l.Publish(ctx, "token:c", 21, 0)
	if status.Code(err) != codes.ResourceExhausted || apierr.Classify(err) != apierr.Permanent {
		t.Fatalf("a batch over the burst: %v, want ResourceExhausted without RetryInfo", err)
	}
}

func TestTopicCreatesPerMinute(t *testing.T) {
	l, now := clocked(Config{TopicCreatesPerMinute: 3})
	ctx := context.Background()
	if err := l.Publish(ctx, "addr:10.0.0.1", 100, 3); err != nil {
		t.Fatalf("three new topics: %v", err)
	}
	if err := l.Publish(ctx, "addr:10.0.0.1", 100, 0); err != nil {
		t.Fatalf("a publish to known topics is not limited: %v", err)
	}
	if err := l.Publish(ctx, "addr:10.0.0.1", 1, 1); apierr.Classify(err) != apierr.Retry {
		t.Fatalf("a fourth new topic within the minute: %v, want a retryable ResourceExhausted", err)
	}
	*now = now.Add(20 * time.Second)
	if err := l.Publish(ctx, "addr:10.0.0.1", 1, 1); err != nil {
		t.Fatalf("a new topic 20s later: %v", err)
	}
}

// A refused topic creation spends no publish tokens, and a refused publish
// gives back the creations it took.
func TestRefusalSpendsNothing(t *testing.T) {
	l, _ := clocked(Config{PublishRate: 1, PublishBurst: 10, TopicCreatesPerMinute: 1})
	ctx := context.Background()
	if err := l.Publish(ctx, "p", 11, 1); err == nil {
		t.Fatalf("11 messages over a burst of 10 passed")
	}
	if err := l.Publish(ctx, "p", 10, 1); err != nil {
		t.Fatalf("after a refusal, a burst and a creation: %v", err)
	}
}

func TestReceiveRate(t *testing.T) {
	l, now := clocked(Config{ReceiveRate: 10, ReceiveBurst: 10})
	ctx := context.Background()
	if err := l.Receive(ctx, "p"); err != nil {
		t.Fatalf("first receive: %v", err)
	}
	l.Received("p", 30) // a Receive answered more than the bucket held: debt
	err := l.Receive(ctx, "p")
	if apierr.Classify(err) != apierr.Retry {
		t.Fatalf("receive in debt: %v, want a retryable ResourceExhausted", err)
	}
	*now = now.Add(2 * time.Second) // 20 back: still 0 of the 30 owed past the burst
	if err := l.Receive(ctx, "p"); err == nil {
		t.Fatalf("receive passed with the debt not yet paid")
	}
	*now = now.Add(200 * time.Millisecond)
	if err := l.Receive(ctx, "p"); err != nil {
		t.Fatalf("receive after the debt was paid: %v", err)
	}
}

func TestPaceGrantsAtTheRate(t *testing.T) {
	l := New(Config{ReceiveRate: 1000, ReceiveBurst: 100}, prometheus.NewRegistry())
	ctx := context.Background()
	got, err := l.Pace(ctx, "p", 250)
	if err != nil || got != 100 {
		t.Fatalf("Pace(250) = %d, %v; want a burst of 100", got, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Pace(cctx, "p", 1000); err == nil {
		// The bucket is empty: the next grant has to wait, and the ended
		// context ends the wait.
		t.Fatalf("Pace on an empty bucket with an ended context passed")
	}
	unlimited := New(Config{}, prometheus.NewRegistry())
	if got, err := unlimited.Pace(ctx, "p", 5000); err != nil || got != 5000 {
		t.Fatalf("Pace without a limit = %d, %v; want all 5000", got, err)
	}
}

func TestIdleBucketsAreDropped(t *testing.T) {
	l, now := clocked(Config{PublishRate: 1})
	for i := range 100 {
		_ = l.Publish(context.Background(), string(rune('a'+i%26))+time.Duration(i).String(), 1, 0)
	}
	*now = now.Add(idleAfter + 2*time.Minute)
	_ = l.Publish(context.Background(), "last", 1, 0)
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets kept after every other principal was idle for %v, want 1", n, idleAfter)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{PublishRate: -1}, {ReceiveRate: -1}, {PublishBurst: -1}, {ReceiveBurst: -2}, {TopicCreatesPerMinute: -1}} {
		if c.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	if err := (Config{PublishRate: 5, TopicCreatesPerMinute: 60}).Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
}
