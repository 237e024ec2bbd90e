package query

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

const shard = 7

// rig is one shard's state machine over an in-memory Pebble DB; the
// queries read the state its applied commands left.
type rig struct {
	t     *testing.T
	db    *pebble.DB
	s     *fsm.StateMachine
	index uint64
}

func newRig(t *testing.T) *rig {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatalf("pebble.Open() error = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	s := fsm.New(db, shard, nil)
	if _, err := s.Open(nil); err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	return &rig{t: t, db: db, s: s}
}

// apply applies cmds as one entry and answers their outcomes.
func (r *rig) apply(cmds ...*fsmpb.Command) []*fsmpb.Outcome {
	r.t.Helper()
	r.index++
	data, err := proto.Marshal(&fsmpb.Batch{Commands: cmds})
	if err != nil {
		r.t.Fatalf("marshal: %v", err)
	}
	out, err := r.s.Update([]sm.Entry{{Index: r.index, Cmd: data}})
	if err != nil {
		r.t.Fatalf("Update() error = %v", err)
	}
	var outs fsmpb.Outcomes
	if err := proto.Unmarshal(out[0].Result.Data, &outs); err != nil {
		r.t.Fatalf("decode outcome: %v", err)
	}
	return outs.Outcomes
}

// publish stores msgs (published at 1000) and answers their ids.
func (r *rig) publish(msgs ...*fsmpb.StoredMessage) [][]byte {
	r.t.Helper()
	for _, m := range msgs {
		m.PublishedAtMs = 1000
		if m.Topic == "" {
			m.Topic = "t"
		}
	}
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: &fsmpb.Publish{NowMs: 1000, Messages: msgs}}})
	var ids [][]byte
	for _, po := range out[0].Published {
		ids = append(ids, po.MessageId)
	}
	return ids
}

func (r *rig) group(topic, group string) {
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: topic, Group: group}}})
}

// lease leases the default group's copy of id, due at visibleAt, until
// deadline.
func (r *rig) lease(id []byte, visibleAt, deadline int64) {
	r.t.Helper()
	out := r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: visibleAt, Items: []*fsmpb.LeaseItem{{
		Ref: &fsmpb.MessageRef{MessageId: id, Group: fsm.DefaultGroup}, VisibleAtMs: visibleAt, DeadlineMs: deadline,
	}}}}})
	if got := out[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		r.t.Fatalf("lease = %v, want OK", got)
	}
}

func (r *rig) ack(id []byte, attempt uint32) {
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: []*fsmpb.MessageRef{{MessageId: id, Group: fsm.DefaultGroup, Attempt: attempt}}}}})
}

type quiet struct{}

func (quiet) Infof(string, ...interface{})  {}
func (quiet) Errorf(string, ...interface{}) {}
func (quiet) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func payloads(page []Listed) []string {
	var out []string
	for _, l := range page {
		out = append(out, string(l.Message.Payload))
	}
	return out
}

// wantListed lists args of topic t through rd and fails the test unless
// the page holds the payloads want, in order. It answers the page.
func wantListed(t *testing.T, rd *Reader, args ListArgs, want []string) []Listed {
	t.Helper()
	args.Topic = "t"
	page, err := rd.List(args)
	if err != nil {
		t.Fatalf("List() error = %v", err)
	}
	if got := payloads(page); !slices.Equal(got, want) {
		t.Errorf("List(%+v) = %v, want %v", args, got, want)
	}
	return page
}

func msg(payload string, part uint32, due int64) *fsmpb.StoredMessage {
	return &fsmpb.StoredMessage{Payload: []byte(payload), Partition: part, DueAtMs: due}
}

func TestMessage(t *testing.T) {
	r := newRig(t)
	r.group("t", fsm.DefaultGroup)
	r.group("t", "g2")
	ids := r.publish(
		&fsmpb.StoredMessage{Payload: []byte("a"), DueAtMs: 5000, Key: "k1", Headers: map[string]string{"h": "v"}, Priority: 3, ExpiresAtMs: 90000},
		msg("b", 0, 2000),
	)
	r.lease(ids[1], 2000, 8000)

	tests := []struct {
		name  string
		nowMs int64
		id    []byte
		want  []Copy // nil: the message is gone
	}{
		{"scheduled", 1000, ids[0], []Copy{{Group: "default", State: Scheduled, VisibleAtMs: 5000}, {Group: "g2", State: Scheduled, VisibleAtMs: 5000}}},
		{"due", 5000, ids[0], []Copy{{Group: "default", State: Ready, VisibleAtMs: 5000}, {Group: "g2", State: Ready, VisibleAtMs: 5000}}},
		{"leased", 3000, ids[1], []Copy{{Group: "default", State: InFlight, Attempt: 1, VisibleAtMs: 8000}, {Group: "g2", State: Ready, VisibleAtMs: 2000}}},
		{"lease ran out", 8000, ids[1], []Copy{{Group: "default", State: Ready, Attempt: 1, VisibleAtMs: 8000}, {Group: "g2", State: Ready, VisibleAtMs: 2000}}},
		{"unknown id", 1000, make([]byte, 16), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(r.db, shard, tt.nowMs).Message(tt.id)
			if err != nil {
				t.Fatalf("Message() error = %v", err)
			}
			if tt.want == nil {
				if m != nil {
					t.Fatalf("Message() = %+v, want nil", m)
				}
				return
			}
			if m == nil {
				t.Fatal("Message() = nil, want the message")
			}
			if !slices.Equal(m.Copies, tt.want) {
				t.Errorf("Message().Copies = %+v, want %+v", m.Copies, tt.want)
			}
		})
	}
	m, _ := New(r.db, shard, 1000).Message(ids[0])
	if m.Topic != "t" || m.Key != "k1" || string(m.Payload) != "a" || m.Headers["h"] != "v" || m.Priority != 3 ||
		m.DueAtMs != 5000 || m.PublishedAtMs != 1000 || m.ExpiresAtMs != 90000 {
		t.Errorf("Message() = %+v, want the stored fields", m)
	}
}

func TestMessageByKey(t *testing.T) {
	r := newRig(t)
	ids := r.publish(&fsmpb.StoredMessage{Payload: []byte("a"), DueAtMs: 1000, Key: "done", DedupWindowMs: 60000},
		&fsmpb.StoredMessage{Payload: []byte("b"), DueAtMs: 1000, Key: "pending"})
	r.lease(ids[0], 1000, 5000)
	r.ack(ids[0], 1)

	tests := []struct {
		topic, key string
		want       string // payload; "" for none
	}{
		{"t", "pending", "b"},
		{"t", "done", ""}, // remembered for dedup, not pending
		{"t", "missing", ""},
		{"other", "pending", ""},
	}
	for _, tt := range tests {
		t.Run(tt.topic+"/"+tt.key, func(t *testing.T) {
			m, err := New(r.db, shard, 1000).MessageByKey(tt.topic, tt.key)
			if err != nil {
				t.Fatalf("MessageByKey() error = %v", err)
			}
			got := ""
			if m != nil {
				got = string(m.Payload)
			}
			if got != tt.want {
				t.Errorf("MessageByKey(%q, %q) = %q, want %q", tt.topic, tt.key, got, tt.want)
			}
		})
	}
}

func TestListByDue(t *testing.T) {
	r := newRig(t)
	r.group("t", fsm.DefaultGroup)
	r.group("t", "g2")
	ids := r.publish(
		msg("p0-3000", 0, 3000), msg("p1-2000", 1, 2000), msg("p0-1000", 0, 1000),
		msg("p1-4000", 1, 4000), msg("p2-500", 2, 500),
	)
	r.publish(&fsmpb.StoredMessage{Payload: []byte("p0-2500-h"), DueAtMs: 2500, Headers: map[string]string{"tenant": "a"}})
	r.lease(ids[2], 1000, 9000) // p0-1000 is in flight for the default group

	rd := New(r.db, shard, 1000)
	tests := []struct {
		name string
		args ListArgs
		want []string
	}{
		{"both partitions in due order", ListArgs{Group: "default", Partitions: []uint32{0, 1}, PageSize: 10},
			[]string{"p1-2000", "p0-2500-h", "p0-3000", "p1-4000"}},
		{"in flight listed for another group", ListArgs{Group: "g2", Partitions: []uint32{0}, PageSize: 10},
			[]string{"p0-1000", "p0-2500-h", "p0-3000"}},
		{"no partitions means partition 0", ListArgs{Group: "default", PageSize: 10},
			[]string{"p0-2500-h", "p0-3000"}},
		{"one page", ListArgs{Group: "default", Partitions: []uint32{0, 1}, PageSize: 2},
			[]string{"p1-2000", "p0-2500-h"}},
		{"due range", ListArgs{Group: "default", Partitions: []uint32{0, 1, 2}, Filter: Filter{FromMs: 2000, ToMs: 4000}, PageSize: 10},
			[]string{"p1-2000", "p0-2500-h", "p0-3000"}},
		{"header", ListArgs{Group: "default", Partitions: []uint32{0, 1}, Filter: Filter{HeaderKey: "tenant", HeaderValue: "a"}, PageSize: 10},
			[]string{"p0-2500-h"}},
		{"unknown group", ListArgs{Group: "nobody", Partitions: []uint32{0, 1}, PageSize: 10}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantListed(t, rd, tt.args, tt.want) })
	}

	// Paging by cursor visits every scheduled message once, in order.
	var all []string
	args := ListArgs{Topic: "t", Group: "default", Partitions: []uint32{0, 1, 2}, PageSize: 2}
	for range 10 {
		page, err := rd.List(args)
		if err != nil {
			t.Fatalf("List() error = %v", err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, payloads(page)...)
		args.After = page[len(page)-1].Cursor
	}
	if want := []string{"p2-500", "p1-2000", "p0-2500-h", "p0-3000", "p1-4000"}; !slices.Equal(all, want) {
		t.Errorf("List() paged = %v, want %v", all, want)
	}
}

// TestListByDueMessageIDs checks each listed message carries its own id:
// the id parsed from an iterator key must not alias the iterator's buffer.
func TestListByDueMessageIDs(t *testing.T) {
	r := newRig(t)
	r.group("t", fsm.DefaultGroup)
	ids := r.publish(msg("a", 0, 1000), msg("b", 0, 2000), msg("c", 0, 3000))
	page, err := New(r.db, shard, 0).List(ListArgs{Topic: "t", Group: "default", PageSize: 10})
	if err != nil {
		t.Fatalf("List() error = %v", err)
	}
	if len(page) != len(ids) {
		t.Fatalf("List() = %d messages, want %d", len(page), len(ids))
	}
	for i, l := range page {
		if !bytes.Equal(l.Message.ID, ids[i]) {
			t.Errorf("List()[%d] (payload %s) id = %x, want %x", i, l.Message.Payload, l.Message.ID, ids[i])
		}
	}
}

func TestListByKeyPrefix(t *testing.T) {
	r := newRig(t)
	ids := r.publish(
		&fsmpb.StoredMessage{Payload: []byte("order-2"), DueAtMs: 2000, Key: "order-2"},
		&fsmpb.StoredMessage{Payload: []byte("order-1"), DueAtMs: 5000, Key: "order-1"},
		&fsmpb.StoredMessage{Payload: []byte("order-3"), DueAtMs: 1000, Key: "order-3", DedupWindowMs: 60000},
		&fsmpb.StoredMessage{Payload: []byte("user-1"), DueAtMs: 1000, Key: "user-1"},
		&fsmpb.StoredMessage{Payload: []byte("order-4"), DueAtMs: 3000, Key: "order-4", Headers: map[string]string{"h": "x"}},
	)
	r.lease(ids[2], 1000, 5000)
	r.ack(ids[2], 1) // order-3 is done: its key record stays, not pending

	rd := New(r.db, shard, 1000)
	tests := []struct {
		name string
		args ListArgs
		want []string
	}{
		{"key order, pending only", ListArgs{Filter: Filter{KeyPrefix: "order-"}, PageSize: 10}, []string{"order-1", "order-2", "order-4"}},
		{"page", ListArgs{Filter: Filter{KeyPrefix: "order-"}, PageSize: 2}, []string{"order-1", "order-2"}},
		{"after a cursor", ListArgs{Filter: Filter{KeyPrefix: "order-"}, After: []byte("korder-1"), PageSize: 10}, []string{"order-2", "order-4"}},
		{"due range", ListArgs{Filter: Filter{KeyPrefix: "order-", FromMs: 2000, ToMs: 5000}, PageSize: 10}, []string{"order-2", "order-4"}},
		{"header", ListArgs{Filter: Filter{KeyPrefix: "o", HeaderKey: "h", HeaderValue: "x"}, PageSize: 10}, []string{"order-4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range wantListed(t, rd, tt.args, tt.want) {
				if want := "k" + l.Message.Key; string(l.Cursor) != want {
					t.Errorf("cursor of %q = %q, want %q", l.Message.Key, l.Cursor, want)
				}
			}
		})
	}
}

func TestStats(t *testing.T) {
	r := newRig(t)
	r.group("t", fsm.DefaultGroup)
	r.group("t", "g2")
	ids := r.publish(msg("a", 0, 1000), msg("b", 0, 1000), msg("c", 1, 1500), msg("d", 0, 9000), msg("e", 1, 9000))
	r.lease(ids[0], 1000, 3000) // in flight until 3000
	r.lease(ids[1], 1000, 1800) // its lease runs out at 1800

	tests := []struct {
		name       string
		nowMs      int64
		partitions []uint32
		want       []GroupStats
	}{
		{"before anything is due", 900, []uint32{0, 1}, []GroupStats{
			{Group: "default", InFlight: 2, Scheduled: 3},
			{Group: "g2", Scheduled: 5},
		}},
		{"some due, one lease ran out", 2000, []uint32{0, 1}, []GroupStats{
			{Group: "default", Ready: 2, InFlight: 1, Scheduled: 2, OldestReadyAgeMs: 500},
			{Group: "g2", Ready: 3, Scheduled: 2, OldestReadyAgeMs: 1000},
		}},
		{"one partition", 2000, []uint32{1}, []GroupStats{
			{Group: "default", Ready: 1, InFlight: 2, Scheduled: 2, OldestReadyAgeMs: 500},
			{Group: "g2", Ready: 1, Scheduled: 4, OldestReadyAgeMs: 500},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New(r.db, shard, tt.nowMs).Stats("t", tt.partitions)
			if err != nil {
				t.Fatalf("Stats() error = %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Stats(t, %v) at %d = %+v, want %+v", tt.partitions, tt.nowMs, got, tt.want)
			}
		})
	}
	if got, err := New(r.db, shard, 2000).Stats("nothing", nil); err != nil || len(got) != 0 {
		t.Errorf("Stats(nothing) = %v, %v, want none", got, err)
	}
}

func TestDueHistogram(t *testing.T) {
	r := newRig(t)
	ids := r.publish(msg("a", 0, 60_000), msg("b", 0, 60_500), msg("c", 1, 119_999), msg("d", 0, 180_000), msg("e", 0, 240_000))
	r.lease(ids[0], 60_000, 200_000) // in flight: not counted

	tests := []struct {
		name string
		args HistogramArgs
		want []Bucket
	}{
		{"minutes over both partitions", HistogramArgs{Partitions: []uint32{0, 1}, FromMs: 0, ToMs: 240_000, BucketMs: 60_000},
			[]Bucket{{60_000, 2}, {180_000, 1}}},
		{"partition 0 only", HistogramArgs{FromMs: 0, ToMs: 300_000, BucketMs: 60_000},
			[]Bucket{{60_000, 1}, {180_000, 1}, {240_000, 1}}},
		{"one wide bucket", HistogramArgs{Partitions: []uint32{0, 1}, FromMs: 0, ToMs: 3_600_000, BucketMs: 3_600_000},
			[]Bucket{{0, 4}}},
		{"range excludes its end", HistogramArgs{Partitions: []uint32{0, 1}, FromMs: 120_000, ToMs: 180_000, BucketMs: 60_000}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.args.Topic, tt.args.Group = "t", fsm.DefaultGroup
			got, err := New(r.db, shard, 0).DueHistogram(tt.args)
			if err != nil {
				t.Fatalf("DueHistogram() error = %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("DueHistogram(%+v) = %v, want %v", tt.args, got, tt.want)
			}
		})
	}
}

func TestGroupsAndCopies(t *testing.T) {
	r := newRig(t)
	r.group("t", "zeta")
	r.group("t", "alpha")
	ids := r.publish(msg("a", 0, 1000))
	rd := New(r.db, shard, 1000)

	// A topic's first group registration also registers its default group.
	if got, err := rd.Groups("t"); err != nil || !slices.Equal(got, []string{"alpha", "default", "zeta"}) {
		t.Errorf("Groups(t) = %v, %v, want [alpha default zeta]", got, err)
	}
	for _, tt := range []struct {
		topic, group string
		want         bool
	}{{"t", "alpha", true}, {"t", "default", true}, {"t", "nope", false}, {"u", "alpha", false}} {
		if got, err := rd.HasGroup(tt.topic, tt.group); err != nil || got != tt.want {
			t.Errorf("HasGroup(%q, %q) = %v, %v, want %v", tt.topic, tt.group, got, err, tt.want)
		}
	}
	if topic, found, err := rd.CopyTopic(ids[0], "alpha"); err != nil || !found || topic != "t" {
		t.Errorf("CopyTopic(id, alpha) = %q, %v, %v, want t", topic, found, err)
	}
	if _, found, err := rd.CopyTopic(ids[0], "nope"); err != nil || found {
		t.Errorf("CopyTopic(id, nope) found = %v, %v, want no copy", found, err)
	}
	// Another shard's reader sees none of this shard's state.
	if got, err := New(r.db, shard+1, 1000).Groups("t"); err != nil || len(got) != 0 {
		t.Errorf("Groups(t) on another shard = %v, %v, want none", got, err)
	}
}
