package scenario

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// ThroughputConfig configures Throughput.
type ThroughputConfig struct {
	Topic       string        // default "loadtest"
	Duration    time.Duration // how long producers publish; default 10s
	Concurrency int           // producer goroutines; default 8
	Batch       int           // messages per batch; default 100
	SizeBytes   int           // payload bytes; default 100
	DelayMin    time.Duration // each message's delay is uniform in [DelayMin, DelayMax]
	DelayMax    time.Duration
	Linger      time.Duration // Publisher linger; default 1ms
	// PublishTimeout bounds one batch, retries included; default 10s.
	PublishTimeout time.Duration
}

func (c ThroughputConfig) withDefaults() ThroughputConfig {
	if c.Topic == "" {
		c.Topic = "loadtest"
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.SizeBytes < 0 {
		c.SizeBytes = 0
	}
	if c.Linger <= 0 {
		c.Linger = time.Millisecond
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	return c
}

// Validate reports a configuration that cannot run.
func (c ThroughputConfig) Validate() error {
	var errs []error
	if c.DelayMin < 0 || c.DelayMax < 0 {
		errs = append(errs, errors.New("delays must not be negative"))
	}
	if c.DelayMax < c.DelayMin {
		errs = append(errs, fmt.Errorf("delay max %v is below delay min %v", c.DelayMax, c.DelayMin))
	}
	if c.SizeBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("size %d is above 1 MiB", c.SizeBytes))
	}
	return errors.Join(errs...)
}

// ThroughputResult is what Throughput measured.
type ThroughputResult struct {
	Config    ThroughputConfig `json:"config"`
	Published uint64           `json:"published"`
	Failed    uint64           `json:"failed"`
	Elapsed   time.Duration    `json:"elapsed_ns"`
	MsgsPerS  float64          `json:"msgs_per_second"`
	BytesPerS float64          `json:"payload_bytes_per_second"`
	// Latency is per message: from Publisher.Publish to its result.
	Latency Latency `json:"publish_latency"`
	// BatchLatency is per producer window of Batch messages: from the first
	// Publish to the last result.
	BatchLatency Latency `json:"batch_latency"`
	FirstError   string  `json:"first_error,omitempty"`
}

// Throughput runs Concurrency producers that publish windows of Batch
// messages through one shared Publisher for Duration (or until ctx ends),
// each waiting for its window's results before sending the next.
func Throughput(ctx context.Context, c *client.Client, cfg ThroughputConfig) (ThroughputResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return ThroughputResult{}, fmt.Errorf("scenario: throughput: %w", err)
	}
	pub := c.NewPublisher(client.PublisherOptions{
		MaxBatchMessages:   cfg.Batch,
		Linger:             cfg.Linger,
		MaxInFlightBatches: cfg.Concurrency,
		PublishTimeout:     cfg.PublishTimeout,
	})
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	type producerResult struct {
		msgs, batches Histogram
		ok, failed    uint64
		firstErr      error
	}
	results := make([]producerResult, cfg.Concurrency)
	start := time.Now()
	var wg sync.WaitGroup
	for p := range cfg.Concurrency {
		wg.Add(1)
		go func(r *producerResult) {
			defer wg.Done()
			payload := make([]byte, cfg.SizeBytes)
			_, _ = rand.Read(payload)
			futs := make([]*client.PublishFuture, cfg.Batch)
			sent := make([]time.Time, cfg.Batch)
			for runCtx.Err() == nil {
				t0 := time.Now()
				for i := range futs {
					sent[i] = time.Now()
					futs[i] = pub.Publish(&sundialv1.Message{Topic: cfg.Topic, Payload: payload, DelayMs: randDelay(cfg).Milliseconds()})
				}
				for i, f := range futs {
					// Results are awaited past runCtx: a window is counted whole.
					_, err := f.Wait(ctx)
					r.msgs.Record(time.Since(sent[i]))
					if err != nil {
						r.failed++
						if r.firstErr == nil {
							r.firstErr = err
						}
						continue
					}
					r.ok++
				}
				r.batches.Record(time.Since(t0))
			}
		}(&results[p])
	}
	wg.Wait()
	elapsed := time.Since(start)
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer closeCancel()
	_ = pub.Close(closeCtx)

	res := ThroughputResult{Config: cfg, Elapsed: elapsed}
	var msgs, batches Histogram
	for i := range results {
		r := &results[i]
		msgs.Merge(&r.msgs)
		batches.Merge(&r.batches)
		res.Published += r.ok
		res.Failed += r.failed
		if r.firstErr != nil && res.FirstError == "" {
			res.FirstError = r.firstErr.Error()
		}
	}
	res.Latency = msgs.Summary()
	res.BatchLatency = batches.Summary()
	if s := elapsed.Seconds(); s > 0 {
		res.MsgsPerS = float64(res.Published) / s
		res.BytesPerS = float64(res.Published) * float64(cfg.SizeBytes) / s
	}
	if res.Published == 0 && res.Failed > 0 {
		return res, fmt.Errorf("scenario: throughput: every publish failed, first: %s", res.FirstError)
	}
	return res, nil
}

func randDelay(cfg ThroughputConfig) time.Duration {
	if cfg.DelayMax <= cfg.DelayMin {
		return cfg.DelayMin
	}
	return cfg.DelayMin + mrand.N(cfg.DelayMax-cfg.DelayMin+1)
}
