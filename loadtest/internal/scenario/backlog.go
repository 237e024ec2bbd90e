package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// BacklogConfig configures Backlog.
type BacklogConfig struct {
	Load Load `json:"load"`
	// Messages pending, due Delay after publish; default 1,000,000.
	Messages uint64 `json:"messages"`
	// MaxFill bounds the fill; a slow system holds fewer messages (the
	// result says how many, and the RSS per pending message); default 120s.
	MaxFill time.Duration `json:"max_fill_ns"`
	Delay   time.Duration `json:"delay_ns"` // default 1h
	// Canaries are published after the fill, due 1s later, then the
	// servers restart; the first canary delivered after the restart
	// measures recovery. Default 100.
	Canaries int `json:"canaries"`
	// Settle is the pause before RSS is read; default 3s.
	Settle time.Duration `json:"settle_ns"`
	// RestartTimeout bounds the restart and the wait for the first
	// delivery; default 120s.
	RestartTimeout time.Duration `json:"restart_timeout_ns"`
}

func (c BacklogConfig) withDefaults() BacklogConfig {
	c.Load = c.Load.withDefaults()
	if c.Messages == 0 {
		c.Messages = 1_000_000
	}
	if c.MaxFill <= 0 {
		c.MaxFill = 120 * time.Second
	}
	if c.Delay <= 0 {
		c.Delay = time.Hour
	}
	if c.Canaries <= 0 {
		c.Canaries = 100
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Second
	}
	if c.RestartTimeout <= 0 {
		c.RestartTimeout = 120 * time.Second
	}
	return c
}

// BacklogResult is what Backlog measured. RSS figures are per server
// process (per broker for Sundial).
type BacklogResult struct {
	Config    BacklogConfig `json:"config"`
	Published uint64        `json:"published"`
	Failed    uint64        `json:"publish_failed"`
	FillRate  float64       `json:"fill_msgs_per_second"`
	// RSSIdleBytes and RSSBytes are read before and after the fill.
	RSSIdleBytes []int64 `json:"rss_idle_bytes"`
	RSSBytes     []int64 `json:"rss_bytes"`
	// MaxRSSBytes is the largest process after the fill.
	MaxRSSBytes int64 `json:"max_rss_bytes"`
	// RSSPerMsgBytes is the growth of the largest process per pending
	// message.
	RSSPerMsgBytes float64 `json:"rss_per_message_bytes"`
	// DiskBytes is the allocated size of every data directory.
	DiskBytes int64 `json:"disk_bytes"`
	// ReadyAfter runs from the restart of the processes until they accept
	// clients; FirstDue until the first due message was delivered.
	ReadyAfter time.Duration `json:"ready_after_ns"`
	FirstDue   time.Duration `json:"first_due_after_ns"`
	// CanariesDelivered counts canaries delivered after the restart within
	// RestartTimeout.
	CanariesDelivered uint64 `json:"canaries_delivered"`
	FirstError        string `json:"first_error,omitempty"`
	ConsumeError      string `json:"consume_error,omitempty"`
}

func rssAll(pids []int) ([]int64, error) {
	out := make([]int64, len(pids))
	for i, p := range pids {
		v, err := proc.RSSBytes(p)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Backlog fills Messages messages due in Delay, reads every server
// process's RSS and the bytes on disk, then restarts every server process
// and measures the time until the first due message is delivered.
func Backlog(ctx context.Context, s System, cfg BacklogConfig) (BacklogResult, error) {
	cfg = cfg.withDefaults()
	res := BacklogResult{Config: cfg}
	var err error
	if res.RSSIdleBytes, err = rssAll(s.Pids()); err != nil {
		return res, fmt.Errorf("scenario: backlog: %w", err)
	}
	canaries := uint64(cfg.Canaries)
	f := fill(ctx, s, cfg.Load, canaries, cfg.Messages, time.Now().Add(cfg.MaxFill),
		func(uint64) time.Time { return time.Now().Add(cfg.Delay) })
	res.Published, res.Failed, res.FirstError = f.published, f.failed, errString(f.firstErr)
	res.FillRate = rate(f.published, f.elapsed)
	if f.published == 0 {
		return res, fmt.Errorf("scenario: backlog: nothing published, first error: %s", res.FirstError)
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.Settle):
	}
	if res.RSSBytes, err = rssAll(s.Pids()); err != nil {
		return res, fmt.Errorf("scenario: backlog: %w", err)
	}
	for i, v := range res.RSSBytes {
		if v > res.MaxRSSBytes {
			res.MaxRSSBytes = v
			res.RSSPerMsgBytes = float64(v-res.RSSIdleBytes[i]) / float64(f.published)
		}
	}
	for _, d := range s.DataDirs() {
		n, err := proc.DiskBytes(d)
		if err != nil {
			return res, fmt.Errorf("scenario: backlog: %w", err)
		}
		res.DiskBytes += n
	}

	// Canaries come due while the servers are down.
	due := dueMs(time.Now().Add(time.Second))
	cf := fill(ctx, s, Load{Concurrency: 1, Batch: cfg.Canaries, SizeBytes: cfg.Load.SizeBytes}, 0, canaries, time.Now().Add(30*time.Second),
		func(uint64) time.Time { return due })
	if cf.published == 0 {
		return res, fmt.Errorf("scenario: backlog: canaries not published: %w", cf.cause(ctx))
	}
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(time.Until(due) + 200*time.Millisecond):
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.RestartTimeout)
	defer cancel()
	started, err := s.Restart(rctx)
	if err != nil {
		return res, fmt.Errorf("scenario: backlog: restart: %w", err)
	}
	res.ReadyAfter = time.Since(started)
	rec := newReceiver(canaries)
	rec.expect(1)
	stop := startConsumer(rctx, s, cfg.Load.consume(), rec.handle)
	rec.wait(rctx, started.Add(cfg.RestartTimeout))
	res.ConsumeError = errString(stop())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res.CanariesDelivered = rec.got
	if rec.got == 0 {
		return res, fmt.Errorf("scenario: backlog: no due message delivered within %v of the restart", cfg.RestartTimeout)
	}
	res.FirstDue = rec.first.Sub(started)
	return res, nil
}
