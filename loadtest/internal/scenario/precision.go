package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// runHeader tags a precision run's messages so leftovers of other runs on
// the same topic are acked but not counted.
const runHeader = "loadtest-run"

// PrecisionConfig configures Precision.
type PrecisionConfig struct {
	Topic    string        // default "loadtest.precision"
	Group    string        // default: the topic's default group
	Rate     int           // messages per second; default 1000
	Delay    time.Duration // delay of every message; default 2s
	Duration time.Duration // how long to publish; default 10s
	// Grace is how long to keep consuming after the last message is due;
	// default 5s.
	Grace       time.Duration
	MaxInFlight int // subscriber credit; default 256
}

func (c PrecisionConfig) withDefaults() PrecisionConfig {
	if c.Topic == "" {
		c.Topic = "loadtest.precision"
	}
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Delay < 0 {
		c.Delay = 0
	}
	if c.Delay == 0 {
		c.Delay = 2 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 5 * time.Second
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 256
	}
	return c
}

// PrecisionResult is what Precision measured. Lateness is delivery time
// (client clock) minus the message's due_at_unix_ms.
type PrecisionResult struct {
	Config    PrecisionConfig `json:"config"`
	Published int             `json:"published"`
	Failed    int             `json:"publish_failed"`
	Received  int             `json:"received"`
	// Duplicates counts deliveries of a message already received.
	Duplicates int `json:"duplicates"`
	// Early counts deliveries before their due time.
	Early    int           `json:"early"`
	Missing  int           `json:"missing"`
	P50      time.Duration `json:"lateness_p50_ns"`
	P99      time.Duration `json:"lateness_p99_ns"`
	Max      time.Duration `json:"lateness_max_ns"`
	Min      time.Duration `json:"lateness_min_ns"`
	FirstErr string        `json:"first_error,omitempty"`
}

// Precision publishes Rate messages per second, each due Delay later, for
// Duration, while a subscriber acks them; it measures how late (or early)
// each first delivery came. It returns when every published message arrived
// or Grace after the last one was due.
func Precision(ctx context.Context, c *client.Client, cfg PrecisionConfig) (PrecisionResult, error) {
	cfg = cfg.withDefaults()
	run := client.NewRequestID()[:12]
	res := PrecisionResult{Config: cfg}

	var (
		mu        sync.Mutex // guards everything below
		published = map[string]struct{}{}
		seen      = map[string]struct{}{}
		lateness  []time.Duration
		subErr    error
		allIn     = make(chan struct{})
		pubDone   bool
	)
	checkDone := func() {
		if pubDone && len(seen) >= len(published) {
			select {
			case <-allIn:
			default:
				close(allIn)
			}
		}
	}

	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := c.Subscribe(subCtx, client.SubscribeOptions{Topic: cfg.Topic, Group: cfg.Group, MaxInFlight: cfg.MaxInFlight},
			func(hctx context.Context, d *client.Delivery) {
				now := time.Now()
				_ = d.Ack(hctx)
				if d.GetHeaders()[runHeader] != run {
					return
				}
				late := now.Sub(time.UnixMilli(d.GetDueAtUnixMs()))
				mu.Lock()
				defer mu.Unlock()
				if _, dup := seen[d.GetMessageId()]; dup {
					res.Duplicates++
					return
				}
				seen[d.GetMessageId()] = struct{}{}
				lateness = append(lateness, late)
				if late < 0 {
					res.Early++
				}
				checkDone()
			})
		mu.Lock()
		subErr = err
		mu.Unlock()
	}()

	// Publish on a steady schedule: every tick, catch up to rate·elapsed.
	pub := c.NewPublisher(client.PublisherOptions{Linger: time.Millisecond, PublishTimeout: 10 * time.Second})
	var futs []*client.PublishFuture
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	headers := map[string]string{runHeader: run}
	total := int(float64(cfg.Rate) * cfg.Duration.Seconds())
publish:
	for sent := 0; sent < total; {
		select {
		case <-ctx.Done():
			break publish
		case <-tick.C:
		}
		want := min(total, int(float64(cfg.Rate)*time.Since(start).Seconds()))
		for ; sent < want; sent++ {
			futs = append(futs, pub.Publish(&sundialv1.Message{
				Topic: cfg.Topic, Payload: []byte(strconv.Itoa(sent)), Headers: headers, DelayMs: cfg.Delay.Milliseconds(),
			}))
		}
	}
	tick.Stop()
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 30*time.Second)
	_ = pub.Close(closeCtx)
	cancelClose()
	var lastDue time.Time
	mu.Lock()
	for _, f := range futs {
		r, err := f.Wait(ctx)
		if err != nil {
			res.Failed++
			if res.FirstErr == "" {
				res.FirstErr = err.Error()
			}
			continue
		}
		published[r.GetMessageId()] = struct{}{}
		if due := time.UnixMilli(r.GetDueAtUnixMs()); due.After(lastDue) {
			lastDue = due
		}
	}
	res.Published = len(published)
	pubDone = true
	checkDone()
	mu.Unlock()

	wait := time.Until(lastDue) + cfg.Grace
	timer := time.NewTimer(max(wait, 0))
	select {
	case <-allIn:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	stopSub()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	res.Received = len(seen)
	for id := range published {
		if _, ok := seen[id]; !ok {
			res.Missing++
		}
	}
	res.P50 = Percentile(lateness, 0.5)
	res.P99 = Percentile(lateness, 0.99)
	res.Max = Percentile(lateness, 1)
	res.Min = Percentile(lateness, 0)
	if subErr != nil {
		return res, fmt.Errorf("scenario: precision: subscribe: %w", subErr)
	}
	if res.Published == 0 && res.Failed > 0 {
		return res, fmt.Errorf("scenario: precision: every publish failed, first: %s", res.FirstErr)
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	return res, nil
}
