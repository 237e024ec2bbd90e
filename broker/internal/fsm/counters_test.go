package fsm

import (
	"testing"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

func TestCountersReturnToZero(t *testing.T) {
	r := newReplica(t)
	var ids [][]byte
	for range 5 {
		ids = append(ids, r.apply(cmdPublish(100, &fsmpb.StoredMessage{DueAtMs: 100}))[0].Published[0].MessageId)
	}
	var items []*fsmpb.LeaseItem
	for _, id := range ids {
		items = append(items, &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup}, VisibleAtMs: 100, DeadlineMs: 5000})
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: 100, Items: items}}})
	if c := r.counters("t", DefaultGroup); c.Pending != 5 || c.InFlight != 5 {
		t.Fatalf("after leases: %v, want 5 pending, 5 in flight", c)
	}
	var cmds []*fsmpb.Command
	for _, id := range ids {
		cmds = append(cmds, ack(id, 1))
	}
	r.apply(cmds...)
	if c := r.counters("t", DefaultGroup); c.Pending != 0 || c.InFlight != 0 {
		t.Fatalf("after acks: %v, want zero", c)
	}
}
