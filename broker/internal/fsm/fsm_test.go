package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

const shard = 101

func memDB(t testing.TB) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatalf("pebble.Open() error = %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// replica applies entries to one state machine and remembers the outcomes.
type replica struct {
	t     testing.TB
	s     *StateMachine
	index uint64
}

func newReplica(t testing.TB) *replica {
	s := New(memDB(t), shard, nil)
	if _, err := s.Open(nil); err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	return &replica{t: t, s: s}
}

func (r *replica) apply(cmds ...*fsmpb.Command) []*fsmpb.Outcome {
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

func (r *replica) hash() []byte {
	r.t.Helper()
	h, err := StateHash(r.s.db, shard)
	if err != nil {
		r.t.Fatalf("StateHash() error = %v", err)
	}
	return h
}

func (r *replica) keyCount() int {
	r.t.Helper()
	it, err := r.s.db.NewIter(nil)
	if err != nil {
		r.t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n
}

type quiet struct{}

func (quiet) Infof(string, ...interface{})  {}
func (quiet) Errorf(string, ...interface{}) {}
func (quiet) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func publish(reqID string, nowMs int64, dues ...int64) *fsmpb.Command {
	p := &fsmpb.Publish{RequestId: reqID, NowMs: nowMs}
	for _, d := range dues {
		p.Messages = append(p.Messages, &fsmpb.StoredMessage{Topic: "t", Payload: []byte("x"), PublishedAtMs: nowMs, DueAtMs: d})
	}
	return &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: p}}
}

func lease(id []byte, attempt uint32, visibleAt, deadline int64) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: visibleAt, Items: []*fsmpb.LeaseItem{{
		Ref: &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup, Attempt: attempt}, VisibleAtMs: visibleAt, DeadlineMs: deadline,
	}}}}}
}

func ack(id []byte, attempt uint32) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: []*fsmpb.MessageRef{{MessageId: id, Group: DefaultGroup, Attempt: attempt}}}}}
}

func TestPublishLeaseAck(t *testing.T) {
	r := newReplica(t)
	empty := r.hash()
	out := r.apply(publish("req-1", 1000, 2000))
	id := out[0].Published[0].MessageId

	// Leasing with the wrong expected due time is refused.
	if got := r.apply(lease(id, 0, 1999, 5000))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_STALE {
		t.Fatalf("lease at wrong due time = %v, want STALE", got)
	}
	if got := r.apply(lease(id, 0, 2000, 5000))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("lease = %v, want OK", got)
	}
	// The lease expired: the copy is leased again as attempt 2.
	if got := r.apply(lease(id, 1, 5000, 9000))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("second lease = %v, want OK", got)
	}
	if got := r.apply(ack(id, 1))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_STALE {
		t.Fatalf("ack of attempt 1 = %v, want STALE", got)
	}
	if got := r.apply(ack(id, 2))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack of attempt 2 = %v, want OK", got)
	}
	if got := r.apply(ack(id, 2))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_NOT_FOUND {
		t.Fatalf("second ack = %v, want NOT_FOUND", got)
	}
	// Forget the dedup record: the shard is back to empty but for the
	// default group registration.
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 1001}}})
	if bytes.Equal(r.hash(), empty) {
		t.Fatalf("state hash equals the empty shard's: the group registration is missing")
	}
}

func TestPublishDedup(t *testing.T) {
	r := newReplica(t)
	first := r.apply(publish("req-1", 1000, 2000, 3000))[0]
	before := r.keyCount()
	again := r.apply(publish("req-1", 1500, 9998, 9999))[0] // later stamps, same count
	if !proto.Equal(first, again) {
		t.Fatalf("retried publish = %v, want the first outcome %v", again, first)
	}
	if after := r.keyCount(); after != before {
		t.Fatalf("retried publish changed the key count from %d to %d", before, after)
	}
}

// TestPublishDedupChecksDigest: a request id reused for other messages
// (another digest or count) is refused and writes nothing; the same
// digest, or a request or record without one, answers the first outcome.
func TestPublishDedupChecksDigest(t *testing.T) {
	withDigest := func(c *fsmpb.Command, d string) *fsmpb.Command {
		c.GetPublish().Digest = []byte(d)
		return c
	}
	r := newReplica(t)
	first := r.apply(withDigest(publish("req-1", 1000, 2000, 3000), "A"))[0]
	before := r.keyCount()
	tests := []struct {
		name   string
		cmd    *fsmpb.Command
		reused bool
	}{
		{"same digest", withDigest(publish("req-1", 1500, 2500, 3500), "A"), false},
		{"no digest in the retry", publish("req-1", 1500, 2500, 3500), false},
		{"other digest", withDigest(publish("req-1", 1500, 2000, 3000), "B"), true},
		{"other digest and count", withDigest(publish("req-1", 1500, 2000), "C"), true},
		{"no digest, other count", publish("req-1", 1500, 2000, 3000, 4000), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := r.apply(tc.cmd)[0]
			want := first
			if tc.reused {
				want = &fsmpb.Outcome{RequestIdReused: true}
			}
			if !proto.Equal(got, want) {
				t.Errorf("publish(%s) = %v, want %v", tc.name, got, want)
			}
			if after := r.keyCount(); after != before {
				t.Errorf("publish(%s) changed the key count from %d to %d", tc.name, before, after)
			}
		})
	}
	old := newReplica(t)
	first = old.apply(publish("req-1", 1000, 2000))[0] // a record written without a digest
	if got := old.apply(withDigest(publish("req-1", 1500, 2000), "A"))[0]; !proto.Equal(got, first) {
		t.Errorf("publish(digest A) after a record without digest = %v, want %v", got, first)
	}
}

func TestDeterministicAcrossReplicas(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	script := func(r *replica) {
		var ids [][]byte
		for i := range 20 {
			out := r.apply(publish("", int64(i), int64(100+i), int64(200+i)))
			for _, p := range out[0].Published {
				ids = append(ids, p.MessageId)
			}
		}
		for i, id := range ids[:10] {
			r.apply(lease(id, 0, int64(100+i/2), 5000))
		}
		r.apply(ack(ids[0], 1), ack(ids[1], 1))
	}
	script(a)
	script(b)
	if !bytes.Equal(a.hash(), b.hash()) {
		t.Fatalf("replicas applying the same entries differ")
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	a := newReplica(t)
	for i := range 50 {
		a.apply(publish("", int64(i), int64(i*10)))
	}
	ctx, err := a.s.PrepareSnapshot()
	if err != nil {
		t.Fatalf("PrepareSnapshot() error = %v", err)
	}
	var buf bytes.Buffer
	if err := a.s.SaveSnapshot(ctx, &buf, nil); err != nil {
		t.Fatalf("SaveSnapshot() error = %v", err)
	}
	b := newReplica(t)
	b.apply(publish("stale", 1, 1)) // recover replaces whatever was there
	if err := b.s.RecoverFromSnapshot(&buf, nil); err != nil {
		t.Fatalf("RecoverFromSnapshot() error = %v", err)
	}
	if !bytes.Equal(a.hash(), b.hash()) {
		t.Fatalf("recovered state differs from the snapshotted one")
	}
	if got, _ := b.s.Lookup(AppliedQuery{}); got.(uint64) != 50 {
		t.Fatalf("applied index after recovery = %v, want 50", got)
	}
}

func TestMalformedEntryIsSkipped(t *testing.T) {
	r := newReplica(t)
	out, err := r.s.Update([]sm.Entry{{Index: 1, Cmd: []byte{0xff, 0xff}}})
	if err != nil || out[0].Result.Value != ResultMalformed {
		t.Fatalf("Update(garbage) = %v, %v, want ResultMalformed", out, err)
	}
}

func FuzzUpdate(f *testing.F) {
	data, _ := proto.Marshal(&fsmpb.Batch{Commands: []*fsmpb.Command{publish("r", 1, 2)}})
	f.Add(data)
	f.Fuzz(func(t *testing.T, cmd []byte) {
		r := newReplica(t)
		if _, err := r.s.Update([]sm.Entry{{Index: 1, Cmd: cmd}}); err != nil {
			t.Fatalf("Update() error = %v", err)
		}
	})
}

func BenchmarkApplyPublishBatch(b *testing.B) {
	b.ReportAllocs()
	r := newReplica(b)
	dues := make([]int64, 100)
	for i := range dues {
		dues[i] = int64(1000 + i*37%500)
	}
	for b.Loop() {
		r.apply(publish("", 1, dues...))
	}
}
