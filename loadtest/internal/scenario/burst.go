package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// BurstConfig configures Burst.
type BurstConfig struct {
	Load Load `json:"load"`
	// Messages all due at one instant; default 1,000,000.
	Messages uint64 `json:"messages"`
	// MaxFill bounds the fill: a slow system gets fewer messages (the
	// result says how many); default 60s.
	MaxFill time.Duration `json:"max_fill_ns"`
	// Probe is how long the fill rate is probed (with far-future messages)
	// to pick the due instant; default 1.5s.
	Probe time.Duration `json:"probe_ns"`
	// DrainTimeout bounds waiting for the deliveries after the due instant;
	// default 120s.
	DrainTimeout time.Duration `json:"drain_timeout_ns"`
	// OnDrain, when set, is called with true at the first delivery (on a
	// consumer goroutine: it must not block) and with false once the drain
	// is over (every message delivered, or DrainTimeout passed); not
	// called when nothing is delivered.
	OnDrain func(begin bool) `json:"-"`
}

func (c BurstConfig) withDefaults() BurstConfig {
	c.Load = c.Load.withDefaults()
	if c.Messages == 0 {
		c.Messages = 1_000_000
	}
	if c.MaxFill <= 0 {
		c.MaxFill = 60 * time.Second
	}
	if c.Probe <= 0 {
		c.Probe = 1500 * time.Millisecond
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 120 * time.Second
	}
	return c
}

// BurstResult is what Burst measured.
type BurstResult struct {
	Config     BurstConfig `json:"config"`
	Published  uint64      `json:"published"`
	Failed     uint64      `json:"publish_failed"`
	FillRate   float64     `json:"fill_msgs_per_second"`
	Delivered  uint64      `json:"delivered"`
	Missing    uint64      `json:"missing"`
	Duplicates uint64      `json:"duplicates"`
	Early      uint64      `json:"early"`
	// DrainElapsed runs from the due instant to the last delivery.
	DrainElapsed time.Duration `json:"drain_elapsed_ns"`
	// DrainRate is Delivered / DrainElapsed: delivered and acked msgs/s.
	DrainRate    float64    `json:"drain_msgs_per_second"`
	Lateness     Latency    `json:"lateness"`
	LatenessCDF  []Quantile `json:"lateness_cdf"`
	FirstError   string     `json:"first_error,omitempty"`
	ConsumeError string     `json:"consume_error,omitempty"`
}

// probeSeq0 starts the seqs of probe messages, outside any run's range.
const probeSeq0 = 1 << 62

// probeRate publishes far-future messages for d and returns the rate.
func probeRate(ctx context.Context, t Target, l Load, d time.Duration) (float64, error) {
	f := fill(ctx, t, l, probeSeq0, 1<<40, time.Now().Add(d), func(uint64) time.Time { return time.Now().Add(2 * time.Hour) })
	if f.published == 0 {
		return 0, fmt.Errorf("scenario: probe published nothing: %w", f.cause(ctx))
	}
	return rate(f.published, f.elapsed), nil
}

// Burst fills Messages messages all due at one instant, picked after a fill
// rate probe so the fill ends before it, while consumers already wait; then
// it measures the drain rate and the lateness of every delivery.
func Burst(ctx context.Context, t Target, cfg BurstConfig) (BurstResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Load.Validate(); err != nil {
		return BurstResult{}, fmt.Errorf("scenario: burst: %w", err)
	}
	res := BurstResult{Config: cfg}
	r, err := probeRate(ctx, t, cfg.Load, cfg.Probe)
	if err != nil {
		return res, fmt.Errorf("scenario: burst: %w", err)
	}
	fillFor := min(time.Duration(float64(cfg.Messages)/r*float64(time.Second)), cfg.MaxFill)
	due := dueMs(time.Now().Add(fillFor*13/10 + 2*time.Second))
	stopAt := due.Add(-time.Second)
	if limit := time.Now().Add(cfg.MaxFill); limit.Before(stopAt) {
		stopAt = limit
	}

	rec := newReceiver(cfg.Messages)
	handle := rec.handle
	var draining sync.Once
	drained := false // set inside draining.Do, read after it
	if cfg.OnDrain != nil {
		handle = func(d Delivery) {
			draining.Do(func() { drained = true; cfg.OnDrain(true) })
			rec.handle(d)
		}
	}
	stop := startConsumer(ctx, t, cfg.Load.consume(), handle)
	f := fill(ctx, t, cfg.Load, 0, cfg.Messages, stopAt, func(uint64) time.Time { return due })
	res.Published, res.Failed, res.FirstError = f.published, f.failed, errString(f.firstErr)
	res.FillRate = rate(f.published, f.elapsed)
	rec.expect(f.published)
	rec.wait(ctx, due.Add(cfg.DrainTimeout))
	draining.Do(func() {}) // no delivery can start the drain from here on
	if drained {
		cfg.OnDrain(false)
	}
	res.ConsumeError = errString(stop())

	rec.mu.Lock()
	defer rec.mu.Unlock()
	res.Delivered = rec.got
	res.Duplicates = rec.dups
	res.Early = rec.early
	if res.Published > res.Delivered {
		res.Missing = res.Published - res.Delivered
	}
	if !rec.last.IsZero() {
		res.DrainElapsed = rec.last.Sub(due)
		res.DrainRate = rate(res.Delivered, res.DrainElapsed)
	}
	res.Lateness = rec.lateness.Summary()
	res.LatenessCDF = rec.lateness.CDF(CDFQuantiles)
	if res.Published == 0 {
		return res, fmt.Errorf("scenario: burst: nothing published, first error: %s", res.FirstError)
	}
	return res, ctx.Err()
}
