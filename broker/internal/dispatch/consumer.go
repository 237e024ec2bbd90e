package dispatch

import (
	"sync"
	"sync/atomic"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Consumer is one attached subscribe stream.
type Consumer struct {
	Topic             string
	Group             string
	Partitions        []uint32
	VisibilityTimeout time.Duration
	AtMostOnce        bool

	// Guarded by the dispatcher's mu: the unspent credit, the copies
	// picked for this consumer and not yet settled, and what a round may
	// still pick for it (credit within MaxCredit).
	credit int
	picked int
	room   int

	// mu guards pending and gone; taken after the dispatcher's mu when
	// both are held.
	mu      sync.Mutex
	pending []*sundialv1.Delivery
	gone    bool
	wake    func() // the dispatcher's Wake, set by Attach

	// full is set by a round that skipped this consumer at MaxCredit;
	// the next Take wakes the dispatcher, as no new credit may come.
	full   atomic.Bool
	ready  chan struct{} // signalled when pending grows
	closed chan struct{} // closed when the dispatcher drops the consumer
	once   sync.Once
}

// NewConsumer returns a consumer with initial credit.
func NewConsumer(topic, group string, partitions []uint32, visibility time.Duration, atMostOnce bool, credit int) *Consumer {
	return &Consumer{
		Topic: topic, Group: group, Partitions: partitions,
		VisibilityTimeout: visibility, AtMostOnce: atMostOnce,
		credit: credit,
		ready:  make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
}

// Ready is signalled when deliveries are waiting in Take.
func (c *Consumer) Ready() <-chan struct{} { return c.ready }

// Closed is closed when the dispatcher stops (leadership lost).
func (c *Consumer) Closed() <-chan struct{} { return c.closed }

// Take returns and clears the waiting deliveries.
func (c *Consumer) Take() []*sundialv1.Delivery {
	c.mu.Lock()
	out := c.pending
	c.pending = nil
	wake := c.wake
	c.mu.Unlock()
	if len(out) > 0 && wake != nil && c.full.Swap(false) {
		wake()
	}
	return out
}

// buffered is how many deliveries wait in Take.
func (c *Consumer) buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// push queues deliveries, signalling Ready once for all of them so the
// stream takes them together; false if the consumer is closed.
func (c *Consumer) push(ds ...*sundialv1.Delivery) bool {
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return false
	}
	c.pending = append(c.pending, ds...)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	return true
}

// close stops pushes to c and returns what it was pushed but never took.
func (c *Consumer) close() []*sundialv1.Delivery {
	c.once.Do(func() { close(c.closed) })
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone = true
	left := c.pending
	c.pending = nil
	return left
}
