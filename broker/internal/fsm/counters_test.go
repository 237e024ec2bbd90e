package fsm

import (
	"testing"

	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
)

func TestCountersReturnToZero(t *testing.T) {
	r := newReplica(t)
	var ids [][]byte
	for range 5 {
		ids = append(ids, r.apply(cmdPublish(100, &raftv1.StoredMessage{DueAtMs: 100}))[0].Published[0].MessageId)
	}
	var items []*raftv1.LeaseItem
	for _, id := range ids {
		items = append(items, &raftv1.LeaseItem{Ref: &raftv1.MessageRef{MessageId: id, Group: DefaultGroup}, VisibleAtMs: 100, DeadlineMs: 5000})
	}
	r.apply(&raftv1.Command{Kind: &raftv1.Command_Lease{Lease: &raftv1.Lease{NowMs: 100, Items: items}}})
	if c := r.counters("t", DefaultGroup); c.Pending != 5 || c.InFlight != 5 {
		t.Fatalf("after leases: %v, want 5 pending, 5 in flight", c)
	}
	var cmds []*raftv1.Command
	for _, id := range ids {
		cmds = append(cmds, ack(id, 1))
	}
	r.apply(cmds...)
	if c := r.counters("t", DefaultGroup); c.Pending != 0 || c.InFlight != 0 {
		t.Fatalf("after acks: %v, want zero", c)
	}
}
