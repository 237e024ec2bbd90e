package scenario

import (
	"context"
	"encoding/binary"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Message is one message a scenario publishes. Payload starts with a
// 16-byte header (Seq, due time in unix microseconds; see EncodePayload) so
// every system carries the same bytes and a delivery says which message it
// is and when it was due.
type Message struct {
	Seq     uint64
	Due     time.Time
	Payload []byte
}

// Delivery is one delivered, acknowledged message.
type Delivery struct {
	Payload []byte
	// Received is when the consumer got the message, before acking it.
	Received time.Time
}

// ConsumeOptions shapes a consumer the same way on every system.
type ConsumeOptions struct {
	// Workers is the number of concurrent consumers (connections, fetch
	// loops or handler slots).
	Workers int
	// Prefetch is how many deliveries each worker may hold or claim at once.
	Prefetch int
}

// Target is a delayed queue under test. Implementations live in package
// target; every scenario runs the same code against each.
type Target interface {
	// Publish durably stores msgs, each due at its Due time (truncated to
	// the millisecond), as one batch where the system has batches. It
	// returns nil only when the system acknowledged every message.
	Publish(ctx context.Context, msgs []Message) error
	// Consume delivers due messages to handle, acking each, until ctx ends
	// or the connection breaks. handle is called concurrently.
	Consume(ctx context.Context, opts ConsumeOptions, handle func(Delivery)) error
}

// System is a Target whose server processes loadtest runs itself.
type System interface {
	Target
	// Pids are the server processes (for RSS).
	Pids() []int
	// DataDirs hold the server's persistent state (for bytes on disk).
	DataDirs() []string
	// Restart stops every server process gracefully and starts them again;
	// it returns when they accept clients, with the moment they were
	// started.
	Restart(ctx context.Context) (time.Time, error)
}

// Failoverer is a System that can lose its most important node.
type Failoverer interface {
	// KillLeader SIGKILLs the node leading the most shards and says which.
	KillLeader(ctx context.Context) (string, error)
}

// HeaderBytes is the size of the payload header.
const HeaderBytes = 16

// EncodePayload returns a payload of max(size, HeaderBytes) bytes holding
// seq and due.
func EncodePayload(seq uint64, due time.Time, size int) []byte {
	b := make([]byte, max(size, HeaderBytes))
	binary.BigEndian.PutUint64(b, seq)
	binary.BigEndian.PutUint64(b[8:], uint64(due.UnixMicro()))
	for i := HeaderBytes; i < len(b); i++ {
		b[i] = 'x'
	}
	return b
}

// SetDue rewrites the due time in payload (for systems that round it).
func SetDue(payload []byte, due time.Time) {
	if len(payload) >= HeaderBytes {
		binary.BigEndian.PutUint64(payload[8:], uint64(due.UnixMicro()))
	}
}

var errShortPayload = errors.New("scenario: payload shorter than its header")

// DecodePayload reads the header written by EncodePayload.
func DecodePayload(b []byte) (seq uint64, due time.Time, err error) {
	if len(b) < HeaderBytes {
		return 0, time.Time{}, errShortPayload
	}
	return binary.BigEndian.Uint64(b), time.UnixMicro(int64(binary.BigEndian.Uint64(b[8:]))), nil
}

// dueMs truncates t to the millisecond, the resolution every system stores.
func dueMs(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// Bitset is a fixed-size concurrent set of sequence numbers.
type Bitset struct {
	n     uint64
	words []uint64
}

// NewBitset holds seq numbers in [0, n).
func NewBitset(n uint64) *Bitset { return &Bitset{n: n, words: make([]uint64, (n+63)/64)} }

// Set adds seq and reports whether it was new; out-of-range seqs report
// false.
func (b *Bitset) Set(seq uint64) bool {
	if seq >= b.n {
		return false
	}
	w := seq / 64
	mask := uint64(1) << (seq % 64)
	old := atomic.OrUint64(&b.words[w], mask)
	return old&mask == 0
}

// Has reports whether seq was set.
func (b *Bitset) Has(seq uint64) bool {
	if seq >= b.n {
		return false
	}
	w := seq / 64
	return atomic.LoadUint64(&b.words[w])&(1<<(seq%64)) != 0
}

// Count is the number of set seqs.
func (b *Bitset) Count() uint64 {
	var n int
	for i := range b.words {
		n += bits.OnesCount64(atomic.LoadUint64(&b.words[i]))
	}
	return uint64(n)
}

// receiver records deliveries of one run: which seqs arrived, duplicates,
// early deliveries and the lateness distribution. Its handle method is safe
// for concurrent use.
type receiver struct {
	n    uint64 // seqs in [0, n) belong to the run; others are foreign
	seen *Bitset
	// done is closed once target unique deliveries arrived (see expect).
	mu         sync.Mutex // guards the fields below
	lateness   Histogram
	early      uint64
	earliest   time.Duration // most negative lateness
	dups       uint64
	foreign    uint64
	first      time.Time
	last       time.Time
	target     uint64 // deliveries to wait for; 0: not yet known
	got        uint64
	done       chan struct{}
	closedDone bool
}

func newReceiver(n uint64) *receiver {
	return &receiver{n: n, seen: NewBitset(n), done: make(chan struct{})}
}

func (r *receiver) handle(d Delivery) {
	seq, due, err := DecodePayload(d.Payload)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil || seq >= r.n:
		r.foreign++
		return
	case !r.seen.Set(seq):
		r.dups++
		return
	}
	late := d.Received.Sub(due)
	if late < 0 {
		r.early++
		r.earliest = min(r.earliest, late)
	}
	r.lateness.Record(late)
	if r.first.IsZero() || d.Received.Before(r.first) {
		r.first = d.Received
	}
	if d.Received.After(r.last) {
		r.last = d.Received
	}
	r.got++
	r.checkDone()
}

// expect says how many unique deliveries complete the run.
func (r *receiver) expect(n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target = n
	r.checkDone()
}

func (r *receiver) checkDone() {
	if r.target > 0 && r.got >= r.target && !r.closedDone {
		r.closedDone = true
		close(r.done)
	}
}

// wait blocks until every expected delivery arrived, until deadline, or
// until ctx ends.
func (r *receiver) wait(ctx context.Context, deadline time.Time) {
	t := time.NewTimer(max(time.Until(deadline), 0))
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// consumeLoop runs t.Consume until ctx ends, starting it again (after a
// short pause) when it returns early, so a consumer outlives server
// restarts and start-up errors. It returns the first error seen.
func consumeLoop(ctx context.Context, t Target, opts ConsumeOptions, handle func(Delivery)) error {
	var first error
	for attempt := 0; ctx.Err() == nil && attempt < 100000; attempt++ {
		err := t.Consume(ctx, opts, handle)
		if err != nil && ctx.Err() == nil && first == nil {
			first = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return first
}

// startConsumer runs consumeLoop in a goroutine; stop ends it and returns
// its first error.
func startConsumer(ctx context.Context, t Target, opts ConsumeOptions, handle func(Delivery)) (stop func() error) {
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- consumeLoop(cctx, t, opts, handle) }()
	return func() error {
		cancel()
		return <-errc
	}
}
