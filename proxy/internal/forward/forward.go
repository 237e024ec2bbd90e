// Package forward carries calls from the proxy to the broker leading an
// event shard, with one retry policy for every forwarded call:
//
//   - try the cached leader of the shard (learned from NotLeader details or
//     successful calls, else the routing table's hint, else the first
//     replica);
//   - on NotLeader naming an address, retry there at once (a few times in a
//     row at most, against redirect loops);
//   - on any other error apierr.Classify calls Retry (NotLeader without an
//     address, WrongShard, Unavailable, Aborted, ResourceExhausted with
//     RetryInfo), move to the shard's next replica after a backoff of 25ms
//     doubling to 400ms;
//   - on Permanent and Unknown errors (a deadline, an internal error: the
//     call may have taken effect), give the error back: the client decides,
//     knowing whether its request is idempotent;
//   - a WrongShard naming a topic (a misplaced message, not a moved shard)
//     is the answer: the caller routes the message again with a newer
//     table;
//   - cut a try whose broker a newer routing table no longer names as the
//     shard's leader (it froze or was deposed, and the other replicas
//     elected one) and try the new leader at once, rather than wait out
//     the try: the call may have taken effect at the old leader, as with a
//     connection lost mid-call, which shards answer from their request-id
//     dedup records (the SDK sets an id on every change); a write without
//     a request id goes through DoUncut, whose try is never cut, since a
//     second try would apply it again;
//   - give up at the forward timeout or the caller's deadline with
//     codes.Unavailable "shard N has no reachable leader".
//
// Calls any broker answers (Any, AnyRead) go round robin over the brokers,
// those whose reads timed out lately last; reads give each broker a part of
// their time only, so a hung broker with an open connection does not use
// it all. Long is Any for calls that run past the forward timeout, and
// Once for calls that must reach one broker at most: they move on only
// while the call has reached no broker.
//
// Errors are classified by apierr.Classify (status code and typed details,
// never their text), the classifier the SDK uses too. A Forwarder is safe for concurrent use; its mutex guards the
// leader cache and is never held across a call.
package forward

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

// Backoff between attempts at different replicas.
const (
	MinBackoff = 25 * time.Millisecond
	MaxBackoff = 400 * time.Millisecond
	// maxRedirects bounds back-to-back immediate retries on NotLeader
	// redirects before the policy falls back to backing off.
	maxRedirects = 3
)

// Tables gives the current routing table.
type Tables interface {
	Table() *routing.Table
	Wait(ctx context.Context) (*routing.Table, error)
	// Changed returns a channel closed when the next table is installed.
	Changed() <-chan struct{}
}

// Call is one attempt of a forwarded call on conn.
type Call func(ctx context.Context, conn *grpc.ClientConn) error

type leaderEntry struct {
	addr string
	hint uint64 // the table's leader hint when addr was learned
}

// Forwarder sends calls to shard leaders.
type Forwarder struct {
	tables  Tables
	pool    *routing.Pool
	seeds   []string
	timeout time.Duration
	metrics *Metrics
	next    atomic.Uint64 // round-robin start for Any

	mu      sync.Mutex // guards leaders and slow
	leaders map[uint64]leaderEntry
	slow    map[string]time.Time // broker address -> until when Any tries it last
}

// New returns a forwarder giving up on a call after timeout. seeds are the
// broker addresses Any tries besides the table's nodes.
func New(tables Tables, pool *routing.Pool, seeds []string, timeout time.Duration, m *Metrics) *Forwarder {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Forwarder{
		tables:  tables,
		pool:    pool,
		seeds:   seeds,
		timeout: timeout,
		metrics: m,
		leaders: make(map[uint64]leaderEntry),
		slow:    make(map[string]time.Time),
	}
}

// Leader is the address a call for shard should try first, "" when
// neither the cache nor the table knows any replica of it.
func (f *Forwarder) Leader(shard uint64) string {
	t := f.tables.Table()
	hint := t.LeaderHint(shard)
	f.mu.Lock()
	e, ok := f.leaders[shard]
	f.mu.Unlock()
	if ok && e.hint == hint {
		return e.addr
	}
	if addrs := t.ReplicaAddrs(shard); len(addrs) > 0 {
		return addrs[0]
	}
	if ok {
		return e.addr
	}
	return ""
}

// Succeeded records that addr answered a call for shard as its leader.
func (f *Forwarder) Succeeded(shard uint64, addr string) {
	f.setLeader(shard, addr)
}

func (f *Forwarder) setLeader(shard uint64, addr string) {
	hint := f.tables.Table().LeaderHint(shard)
	f.mu.Lock()
	f.leaders[shard] = leaderEntry{addr: addr, hint: hint}
	f.mu.Unlock()
}

// Verdict is what the policy makes of a failed attempt.
type Verdict int

const (
	// Fail means the error is the answer; do not retry.
	Fail Verdict = iota
	// RetryNow means a redirect to the named leader; retry at once.
	RetryNow
	// RetryLater means retry at the next replica after a backoff.
	RetryLater
)

// Observe learns from err, the failure of an attempt at addr for shard:
// it updates the leader cache and says whether and when to retry.
func (f *Forwarder) Observe(shard uint64, addr string, err error) Verdict {
	if nl, ok := apierr.AsNotLeader(err); ok {
		f.metrics.retries.WithLabelValues("not_leader").Inc()
		if a := nl.GetLeaderAddr(); a != "" && a != addr {
			f.setLeader(shard, a)
			return RetryNow
		}
		f.advance(shard, addr)
		return RetryLater
	}
	if ws, wrong := apierr.AsWrongShard(err); wrong && ws.GetTopic() != "" {
		return Fail
	}
	if apierr.Classify(err) == apierr.Retry {
		f.metrics.retries.WithLabelValues(retryReason(err)).Inc()
		f.advance(shard, addr)
		return RetryLater
	}
	return Fail
}

// retryReason labels a Retry error other than NotLeader for the retries
// metric: wrong_shard, unavailable, aborted or resource_exhausted.
func retryReason(err error) string {
	if _, ok := apierr.AsWrongShard(err); ok {
		return "wrong_shard"
	}
	switch status.Code(err) {
	case codes.Aborted:
		return "aborted"
	case codes.ResourceExhausted:
		return "resource_exhausted"
	}
	return "unavailable"
}

// advance moves the cached leader of shard to the replica after failed.
func (f *Forwarder) advance(shard uint64, failed string) {
	addrs := f.tables.Table().ReplicaAddrs(shard)
	if len(addrs) == 0 {
		return
	}
	next := addrs[0]
	for i, a := range addrs {
		if a == failed {
			next = addrs[(i+1)%len(addrs)]
			break
		}
	}
	f.setLeader(shard, next)
}

// ErrUnknownShard is wrapped by errors for shards the routing table does
// not know.
var ErrUnknownShard = errors.New("forward: shard not in routing table")

// Do runs call against the leader of shard under the retry policy. The
// error is call's last error when it was not retryable, the caller's
// context error when the caller cancelled, or codes.Unavailable when the
// time ran out.
func (f *Forwarder) Do(ctx context.Context, shard uint64, call Call) error {
	return f.DoFor(ctx, shard, f.timeout, call)
}

// DoFor is Do with its own timeout instead of the forward timeout, for
// calls that wait on purpose (a long-polling Receive).
func (f *Forwarder) DoFor(ctx context.Context, shard uint64, timeout time.Duration, call Call) error {
	return f.doFor(ctx, shard, timeout, true, call)
}

// DoUncut is Do for a write that carries no request id: the shard cannot
// answer a second try from a dedup record, so a try is not cut when a
// newer table moves the shard's leader; it runs until its broker answers,
// or the timeout.
func (f *Forwarder) DoUncut(ctx context.Context, shard uint64, call Call) error {
	return f.doFor(ctx, shard, f.timeout, false, call)
}

func (f *Forwarder) doFor(ctx context.Context, shard uint64, timeout time.Duration, cut bool, call Call) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := f.tables.Wait(ctx); err != nil {
		return f.giveUp(parent, shard, err)
	}
	backoff := MinBackoff
	redirects := 0
	for {
		addr := f.Leader(shard)
		if addr == "" {
			return status.Errorf(codes.NotFound, "%v: shard %d (routing version %d)", ErrUnknownShard, shard, f.tables.Table().Version())
		}
		var moved bool
		var err error
		if cut {
			moved, err = f.tryLeader(ctx, shard, addr, call)
		} else {
			err = f.attempt(ctx, addr, call)
		}
		if err == nil {
			f.Succeeded(shard, addr)
			return nil
		}
		if ctx.Err() != nil {
			return f.giveUp(parent, shard, err)
		}
		if moved {
			f.metrics.retries.WithLabelValues("leader_moved").Inc()
			continue
		}
		switch f.Observe(shard, addr, err) {
		case Fail:
			return err
		case RetryNow:
			if redirects < maxRedirects {
				redirects++
				continue
			}
		}
		redirects = 0
		if !Sleep(ctx, backoff) {
			return f.giveUp(parent, shard, err)
		}
		backoff = min(2*backoff, MaxBackoff)
	}
}

// tryLeader runs one try of call at addr, the broker believed to lead
// shard. moved reports that the try was cut because a table newer than the
// one at the try's start changed the leader of shard to another address;
// the next Leader(shard) answers that one (its leader hint changed, so the
// cache entry no longer counts). A try starts watching the table only once
// it has run for watchAfter: most answer sooner and cost a timer, not a
// goroutine.
func (f *Forwarder) tryLeader(ctx context.Context, shard uint64, addr string, call Call) (moved bool, err error) {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := f.tables.Table().LeaderHint(shard)
	var cut atomic.Bool
	watched := make(chan struct{})
	timer := time.AfterFunc(watchAfter, func() {
		defer close(watched)
		for {
			changed := f.tables.Changed()
			if t := f.tables.Table(); movedOff(t, shard, start, addr) {
				cut.Store(true)
				cancel()
				return
			}
			select {
			case <-changed:
			case <-tctx.Done():
				return
			}
		}
	})
	err = f.attempt(tctx, addr, call)
	cancel()
	if !timer.Stop() {
		<-watched // the watch started: wait for it to see tctx end
	}
	return err != nil && cut.Load() && ctx.Err() == nil, err
}

// watchAfter is how long a try at a shard's leader runs before it watches
// the routing table for the leader moving.
const watchAfter = 50 * time.Millisecond

// movedOff reports whether t names a leader of shard other than start,
// at an address other than addr.
func movedOff(t *routing.Table, shard uint64, start uint64, addr string) bool {
	hint := t.LeaderHint(shard)
	if hint == 0 || hint == start {
		return false
	}
	a := t.NodeAddr(hint)
	return a != "" && a != addr
}

func (f *Forwarder) attempt(ctx context.Context, addr string, call Call) error {
	conn, err := f.pool.Conn(addr)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	return call(ctx, conn)
}

func (f *Forwarder) giveUp(parent context.Context, shard uint64, last error) error {
	if errors.Is(parent.Err(), context.Canceled) {
		return parent.Err()
	}
	return status.Errorf(codes.Unavailable, "shard %d has no reachable leader (last error: %v)", shard, status.Convert(last).Message())
}

// Any runs call against any broker, trying the table's nodes and the seeds
// in turn while apierr.Classify calls their answers Retry. It serves calls
// every broker answers that change something (admin writes, AddShards):
// each attempt has the whole forward timeout, since a write retried at
// another broker after its first attempt timed out could answer, say,
// AlreadyExists for the first attempt's work. Brokers whose reads timed out
// lately are tried last (see SlowInterval).
func (f *Forwarder) Any(ctx context.Context, call Call) error {
	return f.any(ctx, false, call)
}

// AnyRead is Any for calls that only read (the cluster view, topic and
// shard listings): an attempt that does not answer within its own deadline
// (a third of the time left, at least MinTryTimeout) moves on to the next
// broker, so a hung broker whose connection stays open costs a read a
// part of its time, not all of it.
func (f *Forwarder) AnyRead(ctx context.Context, call Call) error {
	return f.any(ctx, true, call)
}

// MinTryTimeout is the least time an attempt of AnyRead gets at one
// broker; an attempt gets a third of the time left when that is more.
const MinTryTimeout = time.Second

// SlowInterval is how long a broker whose AnyRead attempt timed out is
// tried after the others by Any and AnyRead.
const SlowInterval = 30 * time.Second

func (f *Forwarder) any(ctx context.Context, read bool, call Call) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	backoff := MinBackoff
	last := status.Error(codes.Unavailable, "no broker address known")
	for {
		f.mu.Lock()
		addrs := routing.RotateAvoiding(f.brokerAddrs(), int(f.next.Add(1)), f.slow, time.Now())
		f.mu.Unlock()
		for _, addr := range addrs {
			timedOut, err := f.attemptAny(ctx, read, addr, call)
			if err == nil {
				return nil
			}
			last = err
			if ctx.Err() != nil {
				break
			}
			if timedOut {
				f.metrics.tryTimeouts.Inc()
				f.markSlow(addr)
				continue
			}
			if apierr.Classify(err) != apierr.Retry {
				return err
			}
			f.metrics.retries.WithLabelValues("unavailable").Inc()
		}
		if !Sleep(ctx, backoff) {
			if errors.Is(parent.Err(), context.Canceled) {
				return parent.Err()
			}
			return status.Errorf(codes.Unavailable, "no broker reachable (last error: %v)", status.Convert(last).Message())
		}
		backoff = min(2*backoff, MaxBackoff)
	}
}

// attemptAny runs one attempt of Any or AnyRead at addr; timedOut reports
// that a read's own deadline ended it while ctx has time left. The broker
// may answer DeadlineExceeded (it saw the propagated deadline pass) a
// moment before tctx's own timer fires: that counts as timed out too.
func (f *Forwarder) attemptAny(ctx context.Context, read bool, addr string, call Call) (timedOut bool, err error) {
	if !read {
		return false, f.attempt(ctx, addr, call)
	}
	left := time.Until(deadline(ctx))
	tctx, cancel := context.WithTimeout(ctx, max(left/3, MinTryTimeout))
	defer cancel()
	err = f.attempt(tctx, addr, call)
	expired := tctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded
	return err != nil && expired && ctx.Err() == nil, err
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline() // Any's context always has one
	return d
}

// markSlow has Any and AnyRead try addr last for SlowInterval.
func (f *Forwarder) markSlow(addr string) {
	f.mu.Lock()
	f.slow[addr] = time.Now().Add(SlowInterval)
	f.mu.Unlock()
}

func (f *Forwarder) brokerAddrs() []string {
	seen := make(map[string]bool)
	var out []string
	for _, a := range append(f.tables.Table().NodeAddrs(), f.seeds...) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// Sleep waits d or until ctx ends, reporting whether the full wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// String names a verdict for logs.
func (v Verdict) String() string {
	switch v {
	case RetryNow:
		return "retry_now"
	case RetryLater:
		return "retry_later"
	default:
		return "fail"
	}
}
