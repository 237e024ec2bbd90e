package scenario

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// refusingTarget fails every Publish with err and then calls after (once
// per call); it never delivers.
type refusingTarget struct {
	err   error
	after func()
}

func (r refusingTarget) Publish(context.Context, []Message) error {
	r.after()
	return r.err
}

func (refusingTarget) Consume(ctx context.Context, _ ConsumeOptions, _ func(Delivery)) error {
	<-ctx.Done()
	return ctx.Err()
}

// A run that publishes nothing says why, as a wrapped error the caller can
// match: the system's first refusal, or the context's end when no publish
// was attempted.
func TestThroughputNothingPublishedWrapsCause(t *testing.T) {
	refused := errors.New("refused by the system")
	cfg := ThroughputConfig{Load: Load{Concurrency: 1, Batch: 1}, Duration: time.Hour}

	t.Run("first publish error", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err := Throughput(ctx, refusingTarget{err: refused, after: cancel}, cfg)
		if !errors.Is(err, refused) {
			t.Fatalf("Throughput(refusing target) error = %v, want it to wrap %v", err, refused)
		}
	})
	t.Run("context ended before any publish", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Throughput(ctx, refusingTarget{err: refused, after: func() {}}, cfg)
		if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "%!") {
			t.Fatalf("Throughput(cancelled ctx) error = %v, want a wrapped context.Canceled", err)
		}
	})
}
