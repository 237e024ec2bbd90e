// Package quota holds the proxy's per-principal rate limits: messages
// published, deliveries received and topics created implicitly (by a
// first publish), each a token bucket per principal (golang.org/x/time/rate).
//
// A principal is who the auth guard found for a call (its kind and name);
// with authentication off it is the client's network address. A publish or
// Receive over its principal's limit is refused with ResourceExhausted
// carrying a RetryInfo (the SDK waits and sends again; the HTTP API answers
// 429 with Retry-After); a Subscribe stream over it is paced instead: its
// deliveries go out as the bucket refills.
//
// A Limiter is safe for concurrent use; mu guards the buckets. Buckets idle
// for idleAfter are dropped, so a stream of one-off clients cannot grow it
// without bound.
package quota

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config sets the limits; a zero rate is no limit.
type Config struct {
	// PublishRate is messages per second one principal may publish.
	PublishRate float64
	// PublishBurst is how many it may publish at once after a quiet
	// spell; a publish of more messages than this is refused for good.
	// Default: one second's worth, at least 1.
	PublishBurst int
	// ReceiveRate is deliveries per second one principal may receive
	// (Receive and Subscribe together).
	ReceiveRate float64
	// ReceiveBurst is the deliveries it may receive at once. Default: one
	// second's worth, at least 1.
	ReceiveBurst int
	// TopicCreatesPerMinute is how many topics one principal may create
	// by publishing to a topic that does not exist (bursts of as many).
	TopicCreatesPerMinute int
	// GroupCreatesPerMinute is how many groups one principal may create
	// by a first Receive or Subscribe on a group that does not exist.
	GroupCreatesPerMinute int
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.PublishRate < 0 || math.IsNaN(c.PublishRate) || math.IsInf(c.PublishRate, 0):
		return fmt.Errorf("quotas.publish_rate: want messages per second ≥ 0, got %v", c.PublishRate)
	case c.ReceiveRate < 0 || math.IsNaN(c.ReceiveRate) || math.IsInf(c.ReceiveRate, 0):
		return fmt.Errorf("quotas.receive_rate: want deliveries per second ≥ 0, got %v", c.ReceiveRate)
	case c.PublishBurst < 0:
		return fmt.Errorf("quotas.publish_burst: want ≥ 0, got %d", c.PublishBurst)
	case c.ReceiveBurst < 0:
		return fmt.Errorf("quotas.receive_burst: want ≥ 0, got %d", c.ReceiveBurst)
	case c.TopicCreatesPerMinute < 0:
		return fmt.Errorf("quotas.topic_creates_per_minute: want ≥ 0, got %d", c.TopicCreatesPerMinute)
	case c.GroupCreatesPerMinute < 0:
		return fmt.Errorf("quotas.group_creates_per_minute: want ≥ 0, got %d", c.GroupCreatesPerMinute)
	}
	return nil
}

func burst(r float64, b int) int {
	if b > 0 {
		return b
	}
	return max(int(math.Ceil(r)), 1)
}

// idleAfter is how long a principal's buckets are kept unused; by then
// they are full again, so dropping them changes no answer.
const idleAfter = 10 * time.Minute

// Limiter enforces Config per principal.
type Limiter struct {
	cfg     Config
	now     func() time.Time
	refused *prometheus.CounterVec
	paced   prometheus.Counter

	mu      sync.Mutex
	buckets map[string]*buckets
	pruned  time.Time
}

type buckets struct {
	publish, receive, creates, groups *rate.Limiter
	used                              time.Time
}

// New returns a limiter of cfg; reg takes its counters.
func New(cfg Config, reg prometheus.Registerer) *Limiter {
	l := &Limiter{
		cfg: cfg, now: time.Now, buckets: map[string]*buckets{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_proxy_rate_limited_total",
			Help: "Requests refused (publish, receive, topic_create, group_create) over their principal's rate limit.",
		}, []string{"limit"}),
		paced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_subscribe_paced_total",
			Help: "Subscribe credit grants held back to keep their principal within its receive rate.",
		}),
	}
	reg.MustRegister(l.refused, l.paced)
	return l
}

// of returns principal's buckets, making them on first use.
func (l *Limiter) of(principal string) *buckets {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.pruned) > time.Minute {
		for k, b := range l.buckets {
			if now.Sub(b.used) > idleAfter {
				delete(l.buckets, k)
			}
		}
		l.pruned = now
	}
	b := l.buckets[principal]
	if b == nil {
		b = &buckets{}
		if r := l.cfg.PublishRate; r > 0 {
			b.publish = rate.NewLimiter(rate.Limit(r), burst(r, l.cfg.PublishBurst))
		}
		if r := l.cfg.ReceiveRate; r > 0 {
			b.receive = rate.NewLimiter(rate.Limit(r), burst(r, l.cfg.ReceiveBurst))
		}
		if n := l.cfg.TopicCreatesPerMinute; n > 0 {
			b.creates = rate.NewLimiter(rate.Every(time.Minute/time.Duration(n)), n)
		}
		if n := l.cfg.GroupCreatesPerMinute; n > 0 {
			b.groups = rate.NewLimiter(rate.Every(time.Minute/time.Duration(n)), n)
		}
		l.buckets[principal] = b
	}
	b.used = now
	return b
}

// Publish admits a publish of n messages naming newTopics topics that do
// not exist yet, or refuses it with nothing spent.
func (l *Limiter) Publish(ctx context.Context, principal string, n, newTopics int) error {
	if l.cfg.PublishRate <= 0 && (l.cfg.TopicCreatesPerMinute <= 0 || newTopics == 0) {
		return nil
	}
	b := l.of(principal)
	now := l.now()
	var taken []*rate.Reservation
	undo := func() {
		for _, r := range taken {
			r.CancelAt(now)
		}
	}
	take := func(lim *rate.Limiter, n int, limit, what string) error {
		if lim == nil || n == 0 {
			return nil
		}
		if n > lim.Burst() {
			undo()
			l.refused.WithLabelValues(limit).Inc()
			return status.Errorf(codes.ResourceExhausted, "%d %s in one request, over the %d a principal may send at once (quotas.%s_burst): send smaller batches", n, what, lim.Burst(), limit)
		}
		r := lim.ReserveN(now, n)
		if wait := r.DelayFrom(now); wait > 0 {
			r.CancelAt(now)
			undo()
			l.refused.WithLabelValues(limit).Inc()
			return retryLater(ctx, wait, fmt.Sprintf("%s of %s over its limit of %s", what, principal, describe(lim)))
		}
		taken = append(taken, r)
		return nil
	}
	if err := take(b.creates, newTopics, "topic_create", "topics created by publishing"); err != nil {
		return err
	}
	return take(b.publish, n, "publish", "messages")
}

// CreateGroup admits a first Receive or Subscribe on a group that does not
// exist yet (it creates the group), or refuses it.
func (l *Limiter) CreateGroup(ctx context.Context, principal string) error {
	if l.cfg.GroupCreatesPerMinute <= 0 {
		return nil
	}
	lim := l.of(principal).groups
	now := l.now()
	r := lim.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		l.refused.WithLabelValues("group_create").Inc()
		return retryLater(ctx, wait, fmt.Sprintf("groups created by %s over its limit of %s", principal, describe(lim)))
	}
	return nil
}

// Receive admits a Receive while principal's receive bucket holds at least
// one delivery; Received charges what it got.
func (l *Limiter) Receive(ctx context.Context, principal string) error {
	if l.cfg.ReceiveRate <= 0 {
		return nil
	}
	lim := l.of(principal).receive
	now := l.now()
	if lim.TokensAt(now) >= 1 {
		return nil
	}
	l.refused.WithLabelValues("receive").Inc()
	wait := time.Duration((1 - lim.TokensAt(now)) / float64(lim.Limit()) * float64(time.Second))
	return retryLater(ctx, wait, fmt.Sprintf("deliveries of %s over its limit of %s", principal, describe(lim)))
}

// Received charges principal's receive bucket n deliveries, running into
// debt that later Receives wait out.
func (l *Limiter) Received(principal string, n int) {
	if l.cfg.ReceiveRate <= 0 || n == 0 {
		return
	}
	lim := l.of(principal).receive
	now := l.now()
	for n > 0 {
		k := min(n, lim.Burst())
		lim.ReserveN(now, k)
		n -= k
	}
}

// Pace waits until principal may receive up to n more deliveries (credit
// a Subscribe stream grants) and answers how many: at most a burst, so a
// caller granting more comes back for the rest. It answers n at once
// without a receive limit, and ctx's error if ctx ends first.
func (l *Limiter) Pace(ctx context.Context, principal string, n int) (int, error) {
	if l.cfg.ReceiveRate <= 0 || n <= 0 {
		return n, nil
	}
	lim := l.of(principal).receive
	k := min(n, lim.Burst())
	r := lim.ReserveN(l.now(), k)
	if d := r.Delay(); d > 0 {
		l.paced.Inc()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			r.Cancel()
			return 0, ctx.Err()
		}
	}
	return k, nil
}

func describe(lim *rate.Limiter) string {
	per := float64(lim.Limit())
	if per < 1 {
		return fmt.Sprintf("%.4g per minute", per*60)
	}
	return fmt.Sprintf("%.4g per second", per)
}

// retryLater is ResourceExhausted with a RetryInfo of wait; the response
// header retry-after (whole seconds, at least 1) becomes the HTTP API's
// Retry-After.
func retryLater(ctx context.Context, wait time.Duration, why string) error {
	secs := max(int(math.Ceil(wait.Seconds())), 1)
	_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.Itoa(secs)))
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limited: %s; retry in %s", why, wait.Round(time.Millisecond)))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = d
	}
	return st.Err()
}
