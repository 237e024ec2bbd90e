package dispatch

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// dueOf returns n due items of fairness key fk, named fk/i.
func dueOf(fk string, n int) []dueItem {
	out := make([]dueItem, n)
	for i := range out {
		out[i] = dueItem{item: &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: []byte(fmt.Sprintf("%s/%d", fk, i))}}}
	}
	return out
}

// countByKey counts picked items by the fairness key in their name.
func countByKey(items []dueItem) map[string]int {
	counts := map[string]int{}
	for _, it := range items {
		id := string(it.item.Ref.MessageId)
		for i := len(id) - 1; i >= 0; i-- {
			if id[i] == '/' {
				counts[id[:i]]++
				break
			}
		}
	}
	return counts
}

func TestFairSchedulerPick(t *testing.T) {
	tests := []struct {
		name    string
		due     map[string][]dueItem
		limit   int
		weights map[string]int32
		want    map[string]int
	}{
		{"a flood does not starve a trickle", map[string][]dueItem{"a": dueOf("a", 100), "b": dueOf("b", 3)}, 10, nil, map[string]int{"a": 7, "b": 3}},
		{"even split", map[string][]dueItem{"a": dueOf("a", 100), "b": dueOf("b", 100)}, 10, nil, map[string]int{"a": 5, "b": 5}},
		{"weights", map[string][]dueItem{"gold": dueOf("gold", 100), "bronze": dueOf("bronze", 100)}, 40, map[string]int32{"gold": 3}, map[string]int{"gold": 30, "bronze": 10}},
		{"tenants split evenly whatever their job count", map[string][]dueItem{
			"a.j1": dueOf("a.j1", 50), "a.j2": dueOf("a.j2", 50), "a.j3": dueOf("a.j3", 50), "b.j1": dueOf("b.j1", 50),
		}, 12, nil, map[string]int{"a.j1": 2, "a.j2": 2, "a.j3": 2, "b.j1": 6}},
		{"no fairness key is a key like any other", map[string][]dueItem{"": dueOf("", 10), "a": dueOf("a", 10)}, 6, nil, map[string]int{"": 3, "a": 3}},
		// Today a node's own items wait until its children have none due.
		{"a key that is also a parent is served after its children", map[string][]dueItem{"a": dueOf("a", 10), "a.b": dueOf("a.b", 2), "c": dueOf("c", 10)}, 8, nil, map[string]int{"a": 2, "a.b": 2, "c": 4}},
		{"fewer due than the limit", map[string][]dueItem{"a": dueOf("a", 2), "b": dueOf("b", 1)}, 10, nil, map[string]int{"a": 2, "b": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFairScheduler()
			got := countByKey(s.pick(queueKey{"t", "g"}, tt.due, tt.limit, tt.weights))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("pick(limit %d) = %v, want %v", tt.limit, got, tt.want)
			}
		})
	}
}

// A key that was idle comes back at its active siblings' virtual time: it
// earned no credit while it had nothing due.
func TestFairSchedulerIdleEarnsNoCredit(t *testing.T) {
	s := newFairScheduler()
	k := queueKey{"t", "g"}
	s.pick(k, map[string][]dueItem{"a": dueOf("a", 100)}, 50, nil)
	got := countByKey(s.pick(k, map[string][]dueItem{"a": dueOf("a", 100), "b": dueOf("b", 100)}, 10, nil))
	if got["a"] != 5 || got["b"] != 5 {
		t.Fatalf("pick after a was served alone = %v, want 5 each: b earned nothing while idle", got)
	}
}

func TestFairSchedulerPrune(t *testing.T) {
	s := newFairScheduler()
	read, unread := queueKey{"t", "read"}, queueKey{"t", "unread"}
	s.pick(read, map[string][]dueItem{"a": dueOf("a", 1)}, 1, nil)
	s.pick(unread, map[string][]dueItem{"a": dueOf("a", 1)}, 1, nil)
	s.prune(func(k queueKey) bool { return k == read })
	if _, ok := s.queues[unread]; ok {
		t.Fatalf("prune kept the state of a queue nobody reads")
	}
	if _, ok := s.queues[read]; !ok {
		t.Fatalf("prune dropped the state of a queue still read")
	}
}

// A shard serves a queue's partitions in turn: a partition with many due
// copies does not hold back another partition's, on DELAYED and FAIR
// topics alike (docs/queue-semantics.md, FAIR topics, across partitions).
func TestPartitionsServedInTurn(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRigWith(t, Config{Policy: func(string) Policy { return Policy{Fair: fair} }})
				c := NewConsumer("t", "default", []uint32{0, 1}, time.Minute, false, 0)
				r.d.Attach(c)
				now := time.Now().UnixMilli()
				var msgs []*fsmpb.StoredMessage
				for range 20 {
					msgs = append(msgs, &fsmpb.StoredMessage{Topic: "t", Partition: 0, Payload: []byte("p0"), DueAtMs: now - 10, Fair: fair, FairnessKey: "a"})
				}
				msgs = append(msgs, &fsmpb.StoredMessage{Topic: "t", Partition: 1, Payload: []byte("p1"), DueAtMs: now, Fair: fair, FairnessKey: "a"})
				r.publishMessages(msgs...)
				got := take(t, r, c, 3)
				if !slices.Contains(got, "p1") {
					t.Fatalf("first 3 deliveries = %v, want partition 1's among them (20 due on partition 0)", got)
				}
			})
		})
	}
}
