package subscribe

import (
	"math"
	"slices"
)

// Grant hands n more credit to a shard stream.
type Grant struct {
	Shard uint64
	N     int64
}

// maxCredit bounds the credit a client may hold granted at once; shard
// frames carry int32.
const maxCredit = math.MaxInt32

// Splitter divides the credit a client granted over the shard streams of
// its subscription.
//
// Invariants: pool + Σheld = the credit the client granted and has not yet
// spent (each delivery spends one, also inside a frame of several), so the shards never hold more than the
// client asked for. Each shard is filled up to a share of that total; the
// rest stays in the pool, from which a shard is refilled as each of its
// deliveries arrives, so a busy shard keeps pulling while a quiet one sits
// on its small share. A single-shard subscription gets everything.
//
// With less credit than shards, some shards hold none until credit
// returns; grants rotate over the idle shards so none is always last.
//
// A Splitter is not safe for concurrent use; the session guards it.
type Splitter struct {
	shards []uint64 // ascending
	held   map[uint64]int64
	pool   int64
	cursor int // rotates ties in Grant
}

// NewSplitter returns a splitter over shards with no credit.
func NewSplitter(shards []uint64) *Splitter {
	ids := slices.Clone(shards)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	held := make(map[uint64]int64, len(ids))
	for _, id := range ids {
		held[id] = 0
	}
	return &Splitter{shards: ids, held: held}
}

// Add puts shard on the splitter (a subscription's plan grew) and fills it
// from the pool up to its share; with an empty pool it waits for credit
// to be granted, spent or returned.
func (s *Splitter) Add(shard uint64) []Grant {
	if _, ok := s.held[shard]; ok {
		return nil
	}
	s.shards = append(s.shards, shard)
	slices.Sort(s.shards)
	s.held[shard] = 0
	s.cursor = 0
	return s.distribute()
}

// Remove takes shard off the splitter (its partitions moved away); the
// credit it held goes back to the pool and on to the other shards.
func (s *Splitter) Remove(shard uint64) []Grant {
	h, ok := s.held[shard]
	if !ok {
		return nil
	}
	delete(s.held, shard)
	if i := slices.Index(s.shards, shard); i >= 0 {
		s.shards = slices.Delete(s.shards, i, i+1)
	}
	s.pool += h
	if s.cursor >= len(s.shards) {
		s.cursor = 0
	}
	return s.distribute()
}

// Outstanding is the granted, unspent credit: pool plus all held.
func (s *Splitter) Outstanding() int64 {
	total := s.pool
	for _, h := range s.held {
		total += h
	}
	return total
}

// Held is the credit shard holds: handed to it, not yet spent.
func (s *Splitter) Held(shard uint64) int64 { return s.held[shard] }

// Pool is the credit not handed to any shard.
func (s *Splitter) Pool() int64 { return s.pool }

// share is how much each shard is filled up to.
func (s *Splitter) share() int64 {
	c, n := s.Outstanding(), int64(len(s.shards))
	switch n {
	case 0:
		return 0
	case 1:
		return c
	}
	return max(1, (c+2*n-1)/(2*n))
}

// Grant adds n (ignored unless positive) to the client's credit and fills
// the shards below their share, emptiest first.
func (s *Splitter) Grant(n int64) []Grant {
	if n <= 0 || len(s.shards) == 0 {
		return nil
	}
	s.pool += min(n, max(0, maxCredit-s.Outstanding()))
	return s.distribute()
}

// Return records that shard handed back n unspent credits (after a
// revoke) and passes them on, starting with the shards after it, so
// credit that sat on a quiet shard moves to the others.
func (s *Splitter) Return(shard uint64, n int64) []Grant {
	h, ok := s.held[shard]
	if !ok || n <= 0 {
		return nil
	}
	n = min(n, h)
	s.held[shard] = h - n
	s.pool += n
	if i := slices.Index(s.shards, shard); i >= 0 {
		s.cursor = (i + 1) % len(s.shards)
	}
	return s.distribute()
}

// distribute fills the shards below their share from the pool, emptiest
// first, ties in rotating order.
func (s *Splitter) distribute() []Grant {
	order := make([]uint64, 0, len(s.shards))
	for i := range s.shards {
		order = append(order, s.shards[(s.cursor+i)%len(s.shards)])
	}
	slices.SortStableFunc(order, func(a, b uint64) int {
		switch ha, hb := s.held[a], s.held[b]; {
		case ha < hb:
			return -1
		case ha > hb:
			return 1
		}
		return 0
	})
	var out []Grant
	share := s.share()
	for _, id := range order {
		if g := s.fill(id, share); g > 0 {
			out = append(out, Grant{Shard: id, N: g})
			// The next grant starts after the last shard served here.
			s.cursor = (slices.Index(s.shards, id) + 1) % len(s.shards)
		}
	}
	return out
}

// Spend records n deliveries from shard (one frame may carry several) and
// refills that shard from the pool up to its share. It returns the refill,
// if any.
func (s *Splitter) Spend(shard uint64, n int64) []Grant {
	h, ok := s.held[shard]
	if !ok {
		return nil
	}
	s.held[shard] = h - min(max(n, 0), h)
	if g := s.fill(shard, s.share()); g > 0 {
		return []Grant{{Shard: shard, N: g}}
	}
	return nil
}

func (s *Splitter) fill(id uint64, share int64) int64 {
	g := min(s.pool, share-s.held[id])
	if g <= 0 {
		return 0
	}
	s.pool -= g
	s.held[id] += g
	return g
}
