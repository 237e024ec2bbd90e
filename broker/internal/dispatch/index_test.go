package dispatch

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// newIndex returns a due index over a store holding one message of topic t
// due at each of dues (ms), and the messages' ids in that order.
func newIndex(t *testing.T, dues ...int64) (*dueIndex, [][]byte) {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatalf("pebble.Open() error = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	log := &shardLog{t: t, s: fsm.New(db, shard, func(uint64, fsm.Change) {})}
	p := &fsmpb.Publish{NowMs: 1}
	for _, due := range dues {
		p.Messages = append(p.Messages, &fsmpb.StoredMessage{Topic: "t", Payload: []byte(fmt.Sprint(due)), DueAtMs: due, ExpiresAtMs: due + 1000})
	}
	out, err := log.propose(context.Background(), &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	var ids [][]byte
	for _, o := range out.Published {
		ids = append(ids, o.MessageId)
	}
	return &dueIndex{shard: shard, db: db, floors: newFloors()}, ids
}

func dues(items []dueItem) []int64 {
	var out []int64
	for _, it := range items {
		out = append(out, it.item.VisibleAtMs)
	}
	return out
}

func TestDueIndexScan(t *testing.T) {
	q := keys.Queue{Topic: "t", Group: "default"}
	x, ids := newIndex(t, 10, 20, 30, 40, 1000)
	leasing := map[string]struct{}{string(ids[1]) + "default": {}}
	tests := []struct {
		name   string
		nowMs  int64
		limit  int
		want   string
		wakeAt int64
	}{
		{"due up to now, skipping the copy being leased", 50, 10, "[10 30 40]", 1000},
		{"stopped at the limit looks again now", 50, 2, "[10 30]", 50},
		{"nothing due yet", 5, 10, "[]", 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, wakeAt, err := x.scan(q, tt.nowMs, tt.limit, leasing)
			if err != nil {
				t.Fatalf("scan() error = %v", err)
			}
			if fmt.Sprint(dues(got)) != tt.want || wakeAt.UnixMilli() != tt.wakeAt {
				t.Fatalf("scan(now %d, limit %d) = %v, wake at %d, want %s, wake at %d", tt.nowMs, tt.limit, dues(got), wakeAt.UnixMilli(), tt.want, tt.wakeAt)
			}
			if f, ok := x.floors.begin(q); !ok || f.ms != 10 {
				t.Fatalf("floor after the scan = %d, %v, want the first entry at 10", f.ms, ok)
			}
			x.floors.end(q, floor{ms: 10}, true)
		})
	}
	if at := x.firstExpiry(); at != 1010 {
		t.Fatalf("firstExpiry() = %d, want 1010", at)
	}
}

func TestDueIndexDeliveryStampsVersion(t *testing.T) {
	x, ids := newIndex(t, 10)
	p := pick{item: &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: ids[0], Group: "default"}, DeadlineMs: 99, Version: 7}, q: keys.Queue{Topic: "t", Group: "default"}}
	d, expiresAt, err := x.delivery(p)
	if err != nil {
		t.Fatalf("delivery() error = %v", err)
	}
	if string(d.Payload) != "10" || d.Attempt != 1 || d.LeaseDeadlineUnixMs != 99 || expiresAt != 1010 {
		t.Fatalf("delivery() = payload %q attempt %d deadline %d, expires %d; want 10, 1, 99, 1010", d.Payload, d.Attempt, d.LeaseDeadlineUnixMs, expiresAt)
	}
	if p.item.Version != 0 {
		t.Fatalf("lease item's content version after delivery() = %d, want the body's: 0, a new message's", p.item.Version)
	}
}
