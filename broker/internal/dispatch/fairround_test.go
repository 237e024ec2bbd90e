package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// roundRig is a FAIR queue's store and a dispatcher that is never started:
// the caller runs pickDue itself, one round at a time, at a fixed instant.
type roundRig struct {
	tb    testing.TB
	s     *fsm.StateMachine
	index uint64
	d     *Dispatcher
	c     *Consumer
}

func newRoundRig(tb testing.TB) *roundRig {
	r := &roundRig{tb: tb}
	var db *pebble.DB
	r.s, db = memStateMachine(tb, &r.d)
	propose := func(context.Context, *fsmpb.Command) (*fsmpb.Outcome, error) {
		return nil, fmt.Errorf("roundRig: no proposals")
	}
	r.d = New(shard, db, propose, nil, nil, nil, Config{Policy: func(string) Policy { return Policy{Fair: true} }}, zap.NewNop(), NewMetrics(prometheus.NewRegistry()))
	r.c = NewConsumer("t", "default", []uint32{0}, time.Minute, false, 0)
	r.d.Attach(r.c)
	return r
}

func (r *roundRig) publish(nowMs int64, msgs ...*fsmpb.StoredMessage) {
	r.tb.Helper()
	r.index++
	data, err := proto.Marshal(&fsmpb.Batch{Commands: []*fsmpb.Command{{Kind: &fsmpb.Command_Publish{Publish: &fsmpb.Publish{NowMs: nowMs, Messages: msgs}}}}})
	if err != nil {
		r.tb.Fatal(err)
	}
	if _, err := r.s.Update([]sm.Entry{{Index: r.index, Cmd: data}}); err != nil {
		r.tb.Fatalf("publish: %v", err)
	}
}

// round picks what is due at nowMs with credit for limit copies, then
// forgets the picks as if their lease had failed, so the next round sees
// the same store.
func (r *roundRig) round(nowMs int64, credit int) []pick {
	r.d.mu.Lock()
	r.c.credit, r.c.picked = credit, 0
	r.d.mu.Unlock()
	picks, _ := r.d.pickDue(nowMs)
	r.d.mu.Lock()
	clear(r.d.leasing)
	r.d.mu.Unlock()
	return picks
}

// A round of a FAIR queue steps only on the keys that have something due:
// keys whose messages are all due later cost it nothing.
func TestFairRoundDoesNotVisitIdleKeys(t *testing.T) {
	const nowMs = 1_000_000
	visited := func(idle int) int {
		r := newRoundRig(t)
		r.publish(nowMs, fairMessages("due", 3, nowMs-10)...)
		for i := range idle {
			r.publish(nowMs, fairMessages(fmt.Sprintf("idle-%d", i), 2, nowMs+60_000)...)
		}
		r.round(nowMs, 100) // the first round may rebuild what it knows from the store
		r.d.index.visited = 0
		if got := len(r.round(nowMs, 100)); got != 3 {
			t.Fatalf("round picked %d copies, want the 3 due", got)
		}
		return r.d.index.visited
	}
	few, many := visited(10), visited(500)
	if few != many {
		t.Fatalf("fair index entries visited in a round: %d beside 10 idle keys, %d beside 500; want the same", few, many)
	}
}

// BenchmarkFairRound is one round of a FAIR queue with 2,000 fairness keys:
// all due with a few messages each, or a few due among many idle ones.
func BenchmarkFairRound(b *testing.B) {
	const nowMs = 1_000_000
	for _, bc := range []struct {
		name      string
		due, idle int
	}{
		{"keys=2000/due=2000", 2000, 0},
		{"keys=2000/due=10", 10, 1990},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := newRoundRig(b)
			for i := range bc.due {
				r.publish(nowMs, fairMessages(fmt.Sprintf("tenant-%d.job", i), 5, nowMs-int64(i%50))...)
			}
			for i := range bc.idle {
				r.publish(nowMs, fairMessages(fmt.Sprintf("idle-%d.job", i), 5, nowMs+60_000)...)
			}
			want := min(5*bc.due, r.d.cfg.MaxLeaseBatch)
			if got := len(r.round(nowMs, 1<<20)); got != want {
				b.Fatalf("round picked %d copies, want %d", got, want)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r.round(nowMs, 1<<20)
			}
		})
	}
}

// pickedKeys counts picks by fairness key (fairMessages puts it in the
// payload), reading the bodies as a round would.
func (r *roundRig) pickedKeys(picks []pick) map[string]int {
	r.tb.Helper()
	counts := map[string]int{}
	bodies, err := r.d.index.bodies()
	if err != nil {
		r.tb.Fatalf("bodies() error = %v", err)
	}
	defer bodies.close()
	for _, p := range picks {
		dl, _, err := bodies.delivery(p)
		if err != nil {
			r.tb.Fatalf("delivery() error = %v", err)
		}
		counts[string(dl.Payload)]++
	}
	return counts
}

// Keys leave a round's view when nothing of theirs is due and come back
// when something is: by time passing, by a publish due in the past, and,
// past the catch-up bound, by rebuilding from the fair index.
func TestFairRoundFindsKeysThatBecomeDue(t *testing.T) {
	const nowMs = 1_000_000
	r := newRoundRig(t)
	r.publish(nowMs, fairMessages("now", 2, nowMs-10)...)
	r.publish(nowMs, fairMessages("later", 2, nowMs+100)...)
	if got := r.pickedKeys(r.round(nowMs, 10)); fmt.Sprint(got) != "map[now:2]" {
		t.Fatalf("round at the start picked %v, want map[now:2]", got)
	}
	if got := r.pickedKeys(r.round(nowMs+100, 10)); fmt.Sprint(got) != "map[later:2 now:2]" {
		t.Fatalf("round once later is due picked %v, want map[later:2 now:2]", got)
	}
	r.publish(nowMs, fairMessages("past", 1, nowMs-500)...)
	if got := r.pickedKeys(r.round(nowMs+100, 10)); fmt.Sprint(got) != "map[later:2 now:2 past:1]" {
		t.Fatalf("round after a publish due in the past picked %v, want map[later:2 now:2 past:1]", got)
	}
	r.publish(nowMs, fairMessages("flood", maxFairCatchUp+10, nowMs-1000)...)
	r.publish(nowMs, fairMessages("trickle", 1, nowMs-5)...)
	got := r.pickedKeys(r.round(nowMs+100, 10))
	if got["trickle"] != 1 || got["flood"] < 1 {
		t.Fatalf("round after more than the catch-up bound picked %v, want trickle's 1 among the flood's", got)
	}
}

// A key whose due copies are all being leased stays in view: when their
// lease fails, the next round picks them again.
func TestFairRoundKeepsKeysBeingLeased(t *testing.T) {
	const nowMs = 1_000_000
	r := newRoundRig(t)
	r.publish(nowMs, fairMessages("a", 2, nowMs-10)...)
	pickOnly := func() int {
		r.d.mu.Lock()
		r.c.credit, r.c.picked = 10, 0
		r.d.mu.Unlock()
		picks, _ := r.d.pickDue(nowMs)
		return len(picks)
	}
	if got := pickOnly(); got != 2 {
		t.Fatalf("first round picked %d, want 2", got)
	}
	if got := pickOnly(); got != 0 {
		t.Fatalf("round while both are being leased picked %d, want 0", got)
	}
	r.d.mu.Lock()
	clear(r.d.leasing) // the lease failed
	r.d.mu.Unlock()
	if got := pickOnly(); got != 2 {
		t.Fatalf("round after the lease failed picked %d, want 2", got)
	}
}

// commit applies a lease of picks, as the round's proposal would.
func (r *roundRig) commit(nowMs int64, picks []pick) {
	r.tb.Helper()
	items := make([]*fsmpb.LeaseItem, len(picks))
	for i, p := range picks {
		items[i] = p.item
	}
	r.index++
	data, err := proto.Marshal(&fsmpb.Batch{Commands: []*fsmpb.Command{{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: nowMs, Items: items}}}}})
	if err != nil {
		r.tb.Fatal(err)
	}
	if _, err := r.s.Update([]sm.Entry{{Index: r.index, Cmd: data}}); err != nil {
		r.tb.Fatalf("lease: %v", err)
	}
}

// A partition keeps at most maxKeys fairness keys in memory; the keys that
// became due past it wait for active ones to go idle, then are served
// without waiting for a wake.
func TestFairRoundKeepsAWindowOfKeys(t *testing.T) {
	const nowMs = 1_000_000
	r := newRoundRig(t)
	r.d.fair.maxKeys = 3
	for i, fk := range []string{"a", "b", "c", "d", "e"} {
		r.publish(nowMs, fairMessages(fk, 1, nowMs-int64(50-i))...)
	}
	seen := map[string]int{}
	for round := 0; len(seen) < 5; round++ {
		if round == 5 {
			t.Fatalf("after 5 rounds delivered %v, want one of each key", seen)
		}
		r.d.mu.Lock()
		r.c.credit, r.c.picked = 10, 0
		r.d.mu.Unlock()
		picks, next := r.d.pickDue(nowMs)
		if len(picks) > 3 {
			t.Fatalf("round %d picked %d copies, want at most the 3 keys in memory", round, len(picks))
		}
		if n := r.d.fair.tree(keys.Queue{Topic: "t", Group: "default"}).leaves; n > 3 {
			t.Fatalf("round %d left %d keys in memory, want at most 3", round, n)
		}
		for k, n := range r.pickedKeys(picks) {
			seen[k] += n
		}
		r.commit(nowMs, picks)
		r.d.mu.Lock()
		clear(r.d.leasing)
		r.d.mu.Unlock()
		// A round that picked something is followed by another when its
		// lease commits; one that picked nothing must ask for it.
		if len(seen) < 5 && len(picks) == 0 && next.UnixMilli() != nowMs {
			t.Fatalf("round %d picked nothing with keys left waiting and answered to look again at %v, want now", round, next)
		}
	}
	if fmt.Sprint(seen) != "map[a:1 b:1 c:1 d:1 e:1]" {
		t.Fatalf("deliveries over three rounds = %v, want one of each key", seen)
	}
}
