package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Load is the client shape every system gets in a run: the same number of
// concurrent producers and consumers and the same batch (pipelining) depth.
type Load struct {
	// Concurrency is the number of producer goroutines, each with one batch
	// in flight, and the number of consumer workers; default 8.
	Concurrency int `json:"concurrency"`
	// Batch is the number of messages per publish and each consumer's
	// prefetch; default 100.
	Batch int `json:"batch"`
	// SizeBytes is the payload size (at least HeaderBytes); default 100.
	SizeBytes int `json:"size_bytes"`
}

func (l Load) withDefaults() Load {
	if l.Concurrency <= 0 {
		l.Concurrency = 8
	}
	if l.Batch <= 0 {
		l.Batch = 100
	}
	if l.SizeBytes <= 0 {
		l.SizeBytes = 100
	}
	return l
}

// Validate reports a load that cannot run.
func (l Load) Validate() error {
	var errs []error
	if l.Concurrency > 10000 {
		errs = append(errs, fmt.Errorf("concurrency %d is above 10000", l.Concurrency))
	}
	if l.Batch > 100000 {
		errs = append(errs, fmt.Errorf("batch %d is above 100000", l.Batch))
	}
	if l.SizeBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("size %d is above 1 MiB", l.SizeBytes))
	}
	return errors.Join(errs...)
}

func (l Load) consume() ConsumeOptions {
	return ConsumeOptions{Workers: l.Concurrency, Prefetch: l.Batch}
}

// fillResult is what fill measured.
type fillResult struct {
	published uint64
	failed    uint64
	elapsed   time.Duration
	batches   Histogram
	firstErr  error
}

// fill publishes up to n messages (seqs from seq0) in batches from
// l.Concurrency producers, until n are acknowledged, stopAt passes, or ctx
// ends. due gives each message's due time.
func fill(ctx context.Context, t Target, l Load, seq0, n uint64, stopAt time.Time, due func(seq uint64) time.Time) fillResult {
	var (
		next     atomic.Uint64
		mu       sync.Mutex // guards res
		res      fillResult
		wg       sync.WaitGroup
		deadline = stopAt
	)
	start := time.Now()
	fctx, cancel := context.WithDeadline(ctx, deadline.Add(30*time.Second))
	defer cancel()
	for range l.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h Histogram
			var ok, failed uint64
			var firstErr error
			for fctx.Err() == nil && time.Now().Before(deadline) {
				lo := next.Add(uint64(l.Batch)) - uint64(l.Batch)
				if lo >= n {
					break
				}
				hi := min(lo+uint64(l.Batch), n)
				msgs := make([]Message, 0, hi-lo)
				for s := lo; s < hi; s++ {
					d := dueMs(due(seq0 + s))
					msgs = append(msgs, Message{Seq: seq0 + s, Due: d, Payload: EncodePayload(seq0+s, d, l.SizeBytes)})
				}
				t0 := time.Now()
				err := t.Publish(fctx, msgs)
				h.Record(time.Since(t0))
				if err != nil {
					failed += uint64(len(msgs))
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				ok += uint64(len(msgs))
			}
			mu.Lock()
			res.batches.Merge(&h)
			res.published += ok
			res.failed += failed
			if res.firstErr == nil {
				res.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// errNoPublishAttempted is why a fill published nothing when it tried
// nothing and its context had not ended: stopAt had passed or n was 0.
var errNoPublishAttempted = errors.New("scenario: no publish attempted")

// cause says why r published nothing: its first publish error, else why ctx
// ended, else errNoPublishAttempted. It is never nil, so callers can wrap it.
func (r fillResult) cause(ctx context.Context) error {
	switch {
	case r.firstErr != nil:
		return r.firstErr
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return errNoPublishAttempted
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func rate(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
