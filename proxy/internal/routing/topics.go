package routing

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sundialmq/sundial/proto/validate"
)

// ErrTopicNotFound is what a Lookup answers for a topic meta does not have.
var ErrTopicNotFound = errors.New("routing: topic not found")

// Lookup asks meta for a topic's partition count (Admin.GetTopic through
// any broker), answering ErrTopicNotFound for a topic that does not exist.
type Lookup func(ctx context.Context, topic string) (uint32, error)

// Topics answers the partition counts of topics the routing table does not
// list yet. The table reaches a proxy from a broker's cached meta state, so
// it can lag a CreateTopic by a moment; routing such a topic as one
// partition would pin subscriptions to partition 0 and send keyed
// publishes to the wrong partition. Topics asks meta instead and remembers
// the answer for a short while (the table lists the topic soon).
//
// Topics is safe for concurrent use; mu guards learned.
type Topics struct {
	lookup Lookup
	ttl    time.Duration
	now    func() time.Time

	mu      sync.Mutex
	learned map[string]learnedTopic
}

type learnedTopic struct {
	partitions uint32
	at         time.Time
}

// learnedTTL is how long a looked-up partition count is used before meta
// is asked again.
const learnedTTL = 10 * time.Second

// maxLearned bounds the topics remembered; past it the memory restarts.
const maxLearned = 4096

// NewTopics returns a resolver asking lookup.
func NewTopics(lookup Lookup) *Topics {
	return &Topics{lookup: lookup, ttl: learnedTTL, now: time.Now, learned: make(map[string]learnedTopic)}
}

// Resolve is t with the partition counts of every topic in topics that t
// does not list, asked from meta. A topic meta does not know either keeps
// the one partition it is created with on first publish. The error is the
// lookup's, for a meta that could not be asked.
func (r *Topics) Resolve(ctx context.Context, t *Table, topics ...string) (*Table, error) {
	var extra map[string]uint32
	for _, topic := range topics {
		base := validate.DeadLetterBase(topic)
		if t.Lists(base) {
			continue
		}
		if _, done := extra[base]; done {
			continue
		}
		n, err := r.partitions(ctx, base)
		if err != nil {
			return nil, err
		}
		if extra == nil {
			extra = make(map[string]uint32)
		}
		extra[base] = n
	}
	return t.With(extra), nil
}

// Learned reports whether meta answered topic's partitions within the
// last while (a topic the table does not list yet, but which exists).
func (r *Topics) Learned(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.learned[validate.DeadLetterBase(topic)]
	return ok && r.now().Sub(e.at) < r.ttl
}

func (r *Topics) partitions(ctx context.Context, topic string) (uint32, error) {
	now := r.now()
	r.mu.Lock()
	e, ok := r.learned[topic]
	r.mu.Unlock()
	if ok && now.Sub(e.at) < r.ttl {
		return e.partitions, nil
	}
	n, err := r.lookup(ctx, topic)
	if errors.Is(err, ErrTopicNotFound) {
		r.Forget(topic)
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	n = max(n, 1)
	r.mu.Lock()
	if len(r.learned) >= maxLearned {
		clear(r.learned)
	}
	r.learned[topic] = learnedTopic{partitions: n, at: now}
	r.mu.Unlock()
	return n, nil
}

// Forget drops what was learned about topic, so the next Resolve asks
// meta again (a broker refused a message routed by it).
func (r *Topics) Forget(topic string) {
	r.mu.Lock()
	delete(r.learned, validate.DeadLetterBase(topic))
	r.mu.Unlock()
}
