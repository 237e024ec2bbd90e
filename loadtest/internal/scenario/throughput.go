package scenario

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// ThroughputConfig configures Throughput.
type ThroughputConfig struct {
	Load     Load          `json:"load"`
	Duration time.Duration `json:"duration_ns"` // how long producers publish; default 10s
	// Each message's delay is uniform in [DelayMin, DelayMax]; defaults 1s
	// and 1h.
	DelayMin time.Duration `json:"delay_min_ns"`
	DelayMax time.Duration `json:"delay_max_ns"`
	// OnPublish, when set, is called with true just before the producers
	// start and with false once every publish has returned: the window the
	// result's rate measures.
	OnPublish func(begin bool) `json:"-"`
}

func (c ThroughputConfig) withDefaults() ThroughputConfig {
	c.Load = c.Load.withDefaults()
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.DelayMin == 0 && c.DelayMax == 0 {
		c.DelayMin, c.DelayMax = time.Second, time.Hour
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
	return errors.Join(append(errs, c.Load.Validate())...)
}

// ThroughputResult is what Throughput measured.
type ThroughputResult struct {
	Config    ThroughputConfig `json:"config"`
	Published uint64           `json:"published"`
	Failed    uint64           `json:"failed"`
	Elapsed   time.Duration    `json:"elapsed_ns"`
	MsgsPerS  float64          `json:"msgs_per_second"`
	// BatchLatency is per Publish call (a batch of Load.Batch messages):
	// a message's publish latency is its batch's.
	BatchLatency Latency `json:"publish_latency"`
	FirstError   string  `json:"first_error,omitempty"`
}

// Throughput publishes from Load.Concurrency producers, one batch in flight
// each, for Duration, with delays spread over [DelayMin, DelayMax].
func Throughput(ctx context.Context, t Target, cfg ThroughputConfig) (ThroughputResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return ThroughputResult{}, fmt.Errorf("scenario: throughput: %w", err)
	}
	if cfg.OnPublish != nil {
		cfg.OnPublish(true)
	}
	start := time.Now()
	spread := cfg.DelayMax - cfg.DelayMin
	f := fill(ctx, t, cfg.Load, 0, 1<<62, start.Add(cfg.Duration), func(uint64) time.Time {
		d := cfg.DelayMin
		if spread > 0 {
			d += mrand.N(spread + 1)
		}
		return time.Now().Add(d)
	})
	if cfg.OnPublish != nil {
		cfg.OnPublish(false)
	}
	res := ThroughputResult{
		Config: cfg, Published: f.published, Failed: f.failed, Elapsed: f.elapsed,
		MsgsPerS: rate(f.published, f.elapsed), BatchLatency: f.batches.Summary(), FirstError: errString(f.firstErr),
	}
	if res.Published == 0 {
		return res, fmt.Errorf("scenario: throughput: nothing published: %w", f.cause(ctx))
	}
	return res, nil
}
