package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	leasing := leasingSet{string(ids[1]) + "default": false}
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
	bodies, err := x.bodies()
	if err != nil {
		t.Fatalf("bodies() error = %v", err)
	}
	defer bodies.close()
	d, expiresAt, err := bodies.delivery(p)
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

// A round reads every body of its picks through one iterator (bodyReader):
// in id order, as a burst's picks come, out of order, and past a message
// that is gone, each read answers that message's body or ErrNotFound.
func TestBodyReaderReadsPicksInAnyOrder(t *testing.T) {
	x, ids := newIndex(t, 10, 20, 30, 40, 50)
	gone := slices.Clone(ids[2])
	gone[len(gone)-1] ^= 0xff // an id of no message
	bodies, err := x.bodies()
	if err != nil {
		t.Fatalf("bodies() error = %v", err)
	}
	defer bodies.close()
	for _, tc := range []struct {
		id   []byte
		want string // payload; "" for ErrNotFound
	}{
		{ids[0], "10"}, {ids[1], "20"}, {ids[3], "40"}, {ids[2], "30"}, {gone, ""}, {ids[4], "50"}, {ids[0], "10"}, {ids[4], "50"},
	} {
		p := pick{item: &fsmpb.LeaseItem{Ref: &fsmpb.MessageRef{MessageId: tc.id, Group: "default"}}, q: keys.Queue{Topic: "t", Group: "default"}}
		d, _, err := bodies.delivery(p)
		switch {
		case tc.want == "" && !errors.Is(err, pebble.ErrNotFound):
			t.Fatalf("delivery(%x) = %v, %v; want ErrNotFound", tc.id, d, err)
		case tc.want != "" && (err != nil || string(d.Payload) != tc.want):
			t.Fatalf("delivery(%x) = %v, %v; want payload %q", tc.id, d, err, tc.want)
		}
	}
}
