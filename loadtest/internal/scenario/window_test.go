package scenario

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// timerTarget is an in-memory delayed queue: every published message is
// delivered at its due time to the consumer, if one is running.
type timerTarget struct {
	mu        sync.Mutex // guards the fields below
	handle    func(Delivery)
	timers    []*time.Timer
	delivered int
}

func (q *timerTarget) Publish(_ context.Context, msgs []Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range msgs {
		q.timers = append(q.timers, time.AfterFunc(time.Until(m.Due), func() {
			q.mu.Lock()
			h := q.handle
			if h != nil {
				q.delivered++
			}
			q.mu.Unlock()
			if h != nil {
				h(Delivery{Payload: m.Payload, Received: time.Now()})
			}
		}))
	}
	return nil
}

func (q *timerTarget) Consume(ctx context.Context, _ ConsumeOptions, handle func(Delivery)) error {
	q.mu.Lock()
	q.handle = handle
	q.mu.Unlock()
	<-ctx.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.handle = nil
	for _, t := range q.timers {
		t.Stop()
	}
	return nil
}

func (q *timerTarget) deliveries() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.delivered
}

// windowEvents records a window hook's calls and what the target had
// delivered at each.
type windowEvents struct {
	mu        sync.Mutex // guards the fields below
	calls     []bool
	delivered []int
}

func (e *windowEvents) hook(q *timerTarget) func(bool) {
	return func(begin bool) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.calls = append(e.calls, begin)
		e.delivered = append(e.delivered, q.deliveries())
	}
}

// The profiled windows of bench: throughput's hook brackets the publishing,
// burst's opens at the first delivery and closes once every message is in.
func TestWindowHooks(t *testing.T) {
	load := Load{Concurrency: 2, Batch: 5, SizeBytes: 32}
	t.Run("throughput publish window", func(t *testing.T) {
		q := &timerTarget{}
		var ev windowEvents
		res, err := Throughput(context.Background(), q, ThroughputConfig{Load: load, Duration: 50 * time.Millisecond, DelayMin: time.Hour, DelayMax: time.Hour, OnPublish: ev.hook(q)})
		if err != nil || res.Published == 0 {
			t.Fatalf("Throughput() = %d published, %v, want some, nil", res.Published, err)
		}
		if !slices.Equal(ev.calls, []bool{true, false}) {
			t.Fatalf("OnPublish calls = %v, want [true false]", ev.calls)
		}
	})
	t.Run("burst drain window", func(t *testing.T) {
		q := &timerTarget{}
		var ev windowEvents
		res, err := Burst(context.Background(), q, BurstConfig{Load: load, Messages: 40, MaxFill: time.Second, Probe: 20 * time.Millisecond, DrainTimeout: 30 * time.Second, OnDrain: ev.hook(q)})
		if err != nil || res.Delivered != res.Published {
			t.Fatalf("Burst() = %d/%d delivered, %v, want all, nil", res.Delivered, res.Published, err)
		}
		if !slices.Equal(ev.calls, []bool{true, false}) {
			t.Fatalf("OnDrain calls = %v, want [true false]", ev.calls)
		}
		if ev.delivered[0] < 1 || ev.delivered[1] != int(res.Published) {
			t.Errorf("OnDrain saw %v delivered at begin and end, want ≥ 1 (the first delivery) and %d (all)", ev.delivered, res.Published)
		}
	})
}
