package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// FailoverConfig configures Failover.
type FailoverConfig struct {
	Load Load `json:"load"`
	// Rate is the steady publish rate in msgs/s; default 2000.
	Rate int `json:"rate"`
	// Before and After are how long to publish before and after the kill;
	// defaults 3s and 7s.
	Before time.Duration `json:"before_ns"`
	After  time.Duration `json:"after_ns"`
	// Delay of every message; default 1s.
	Delay time.Duration `json:"delay_ns"`
	// PublishTimeout bounds one publish call, retries included; default 10s.
	PublishTimeout time.Duration `json:"publish_timeout_ns"`
	// Grace is how long to wait for the acknowledged messages to be
	// delivered after publishing stops; default 30s.
	Grace time.Duration `json:"grace_ns"`
}

func (c FailoverConfig) withDefaults() FailoverConfig {
	c.Load = c.Load.withDefaults()
	if c.Rate <= 0 {
		c.Rate = 2000
	}
	if c.Before <= 0 {
		c.Before = 3 * time.Second
	}
	if c.After <= 0 {
		c.After = 7 * time.Second
	}
	if c.Delay <= 0 {
		c.Delay = time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 30 * time.Second
	}
	return c
}

// FailoverResult is what Failover measured.
type FailoverResult struct {
	Config    FailoverConfig `json:"config"`
	Killed    string         `json:"killed"`
	Published uint64         `json:"published"`
	Failed    uint64         `json:"publish_failed"`
	// Window is how long publishing was impaired after the kill: the
	// longer of MaxStall and LastFailure.
	Window time.Duration `json:"window_ns"`
	// MaxStall is the longest any publish call waited after the kill.
	MaxStall time.Duration `json:"max_stall_ns"`
	// LastFailure is when the last failed publish call ended, after the
	// kill (0: none failed).
	LastFailure time.Duration `json:"last_failure_ns"`
	Delivered   uint64        `json:"delivered"`
	Duplicates  uint64        `json:"duplicates"`
	// Lost counts acknowledged messages never delivered.
	Lost         uint64 `json:"lost"`
	FirstError   string `json:"first_error,omitempty"`
	ConsumeError string `json:"consume_error,omitempty"`
}

// call is one publish call's timing.
type call struct {
	start, end time.Time
	failed     bool
}

// impairment computes, for calls around a kill at kill, the longest wait
// after the kill of any call that ended after it (maxStall) and when the
// last failed call ended (lastFailure), both relative to kill.
func impairment(kill time.Time, calls []call) (maxStall, lastFailure time.Duration) {
	for _, c := range calls {
		if !c.end.After(kill) {
			continue
		}
		from := c.start
		if from.Before(kill) {
			from = kill
		}
		maxStall = max(maxStall, c.end.Sub(from))
		if c.failed {
			lastFailure = max(lastFailure, c.end.Sub(kill))
		}
	}
	return maxStall, lastFailure
}

// Failover publishes at a steady Rate while consumers ack, kills the node
// leading the most shards after Before, keeps publishing for After, and then
// checks that every acknowledged message is delivered.
func Failover(ctx context.Context, s System, cfg FailoverConfig) (FailoverResult, error) {
	cfg = cfg.withDefaults()
	res := FailoverResult{Config: cfg}
	fo, ok := s.(Failoverer)
	if !ok {
		return res, errors.New("scenario: failover: the system has no nodes to kill")
	}
	total := uint64(float64(cfg.Rate) * (cfg.Before + cfg.After).Seconds() * 2)
	rec := newReceiver(total)
	acked := NewBitset(total)
	stop := startConsumer(ctx, s, cfg.Load.consume(), rec.handle)

	var (
		next     atomic.Uint64
		mu       sync.Mutex // guards calls, firstErr and the counters
		calls    []call
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(cfg.Before + cfg.After)
	perWorker := time.Duration(float64(time.Second) * float64(cfg.Load.Batch*cfg.Load.Concurrency) / float64(cfg.Rate))
	for w := range cfg.Load.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(perWorker)
			defer tick.Stop()
			// Stagger the workers over one interval.
			time.Sleep(perWorker * time.Duration(w) / time.Duration(cfg.Load.Concurrency))
			for time.Now().Before(end) && ctx.Err() == nil {
				lo := next.Add(uint64(cfg.Load.Batch)) - uint64(cfg.Load.Batch)
				if lo+uint64(cfg.Load.Batch) > total {
					return
				}
				msgs := make([]Message, cfg.Load.Batch)
				due := dueMs(time.Now().Add(cfg.Delay))
				for i := range msgs {
					seq := lo + uint64(i)
					msgs[i] = Message{Seq: seq, Due: due, Payload: EncodePayload(seq, due, cfg.Load.SizeBytes)}
				}
				pctx, cancel := context.WithTimeout(ctx, cfg.PublishTimeout)
				t0 := time.Now()
				err := s.Publish(pctx, msgs)
				c := call{start: t0, end: time.Now(), failed: err != nil}
				cancel()
				if err == nil {
					for i := range msgs {
						acked.Set(lo + uint64(i))
					}
				}
				mu.Lock()
				calls = append(calls, c)
				if err != nil {
					res.Failed += uint64(len(msgs))
					if firstErr == nil {
						firstErr = err
					}
				} else {
					res.Published += uint64(len(msgs))
				}
				mu.Unlock()
				select {
				case <-tick.C:
				case <-ctx.Done():
				}
			}
		}()
	}
	var killAt time.Time
	var killErr error
	select {
	case <-ctx.Done():
	case <-time.After(cfg.Before):
		killAt = time.Now()
		res.Killed, killErr = fo.KillLeader(ctx)
	}
	wg.Wait()
	res.FirstError = errString(firstErr)
	rec.expect(acked.Count())
	rec.wait(ctx, time.Now().Add(cfg.Delay+cfg.Grace))
	res.ConsumeError = errString(stop())
	if killErr != nil {
		return res, fmt.Errorf("scenario: failover: kill: %w", killErr)
	}
	res.MaxStall, res.LastFailure = impairment(killAt, calls)
	res.Window = max(res.MaxStall, res.LastFailure)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res.Delivered, res.Duplicates = rec.got, rec.dups
	for seq := range total {
		if acked.Has(seq) && !rec.seen.Has(seq) {
			res.Lost++
		}
	}
	return res, ctx.Err()
}
