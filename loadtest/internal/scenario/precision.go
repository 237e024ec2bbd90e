package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// PrecisionConfig configures Precision.
type PrecisionConfig struct {
	Load     Load          `json:"load"`
	Rate     int           `json:"rate"`        // messages per second; default 1000
	Delay    time.Duration `json:"delay_ns"`    // delay of every message; default 2s
	Duration time.Duration `json:"duration_ns"` // how long to publish; default 10s
	// Grace is how long to keep consuming after the last message is due;
	// default 5s.
	Grace time.Duration `json:"grace_ns"`
	// OnSteady, when set, is called with true when the steady state begins
	// (Delay after the first send: from then on messages are published and
	// come due at Rate) and with false when it ends (the last send), on the
	// scheduling goroutine; not called when Duration ≤ Delay.
	OnSteady func(begin bool) `json:"-"`
}

func (c PrecisionConfig) withDefaults() PrecisionConfig {
	c.Load = c.Load.withDefaults()
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Delay <= 0 {
		c.Delay = 2 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 5 * time.Second
	}
	return c
}

// PrecisionResult is what Precision measured. Lateness is the consumer's
// receive time minus the message's due time (the one the system was asked
// for, in milliseconds).
type PrecisionResult struct {
	Config     PrecisionConfig `json:"config"`
	Published  uint64          `json:"published"`
	Failed     uint64          `json:"publish_failed"`
	Received   uint64          `json:"received"`
	Missing    uint64          `json:"missing"`
	Duplicates uint64          `json:"duplicates"`
	// Early counts deliveries before their due time; Earliest is the most
	// negative lateness.
	Early        uint64        `json:"early"`
	Earliest     time.Duration `json:"earliest_ns"`
	Lateness     Latency       `json:"lateness"`
	LatenessCDF  []Quantile    `json:"lateness_cdf"`
	FirstError   string        `json:"first_error,omitempty"`
	ConsumeError string        `json:"consume_error,omitempty"`
}

// Precision publishes Rate messages per second on a steady schedule, each
// due Delay after its scheduled send time, for Duration, while consumers
// ack them; it measures the lateness of each first delivery.
func Precision(ctx context.Context, t Target, cfg PrecisionConfig) (PrecisionResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Load.Validate(); err != nil {
		return PrecisionResult{}, fmt.Errorf("scenario: precision: %w", err)
	}
	res := PrecisionResult{Config: cfg}
	total := uint64(float64(cfg.Rate) * cfg.Duration.Seconds())
	rec := newReceiver(total)
	stop := startConsumer(ctx, t, cfg.Load.consume(), rec.handle)

	// The scheduler queues each message at its send time; workers publish
	// whatever is queued, up to Batch at a time, so a slow publish delays
	// only its own messages.
	queue := make(chan Message, cfg.Rate*int(cfg.Duration/time.Second+2))
	var (
		mu       sync.Mutex // guards the three below
		ok, fail uint64
		firstErr error
		lastDue  time.Time
		wg       sync.WaitGroup
	)
	pctx, cancel := context.WithTimeout(ctx, cfg.Duration+30*time.Second)
	defer cancel()
	for range cfg.Load.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range queue {
				batch := []Message{m}
			more:
				for len(batch) < cfg.Load.Batch {
					select {
					case m2, open := <-queue:
						if !open {
							break more
						}
						batch = append(batch, m2)
					default:
						break more
					}
				}
				err := t.Publish(pctx, batch)
				mu.Lock()
				if err != nil {
					fail += uint64(len(batch))
					if firstErr == nil {
						firstErr = err
					}
				} else {
					ok += uint64(len(batch))
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	interval := time.Second / time.Duration(cfg.Rate)
	var sent uint64
	steady := false
schedule:
	for sent < total {
		select {
		case <-pctx.Done():
			break schedule
		case <-tick.C:
		}
		if !steady && cfg.OnSteady != nil && cfg.Duration > cfg.Delay && time.Since(start) >= cfg.Delay {
			steady = true
			cfg.OnSteady(true)
		}
		want := min(total, uint64(time.Since(start)/interval)+1)
		for ; sent < want; sent++ {
			due := dueMs(start.Add(time.Duration(sent)*interval + cfg.Delay))
			lastDue = due
			queue <- Message{Seq: sent, Due: due, Payload: EncodePayload(sent, due, cfg.Load.SizeBytes)}
		}
	}
	tick.Stop()
	if steady {
		cfg.OnSteady(false)
	}
	close(queue)
	wg.Wait()
	res.Published, res.Failed, res.FirstError = ok, fail, errString(firstErr)
	rec.expect(ok)
	rec.wait(ctx, lastDue.Add(cfg.Grace))
	res.ConsumeError = errString(stop())

	rec.mu.Lock()
	defer rec.mu.Unlock()
	res.Received, res.Duplicates, res.Early, res.Earliest = rec.got, rec.dups, rec.early, rec.earliest
	if res.Published > res.Received {
		res.Missing = res.Published - res.Received
	}
	res.Lateness = rec.lateness.Summary()
	res.LatenessCDF = rec.lateness.CDF(CDFQuantiles)
	if res.Published == 0 {
		return res, fmt.Errorf("scenario: precision: nothing published, first error: %s", res.FirstError)
	}
	return res, ctx.Err()
}
