package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// Tags of the keys a message is made of.
const (
	tagBody = 'm'
	tagCopy = 'c'
	tagDue  = 'd'
)

// messageKeys counts the shard's body, copy and due-index keys.
func messageKeys(r *replica) (bodies, copies, due int) {
	tags := tagsOf(r)
	return tags[tagBody], tags[tagCopy], tags[tagDue]
}

// A message of a one-group topic is two keys, its body (which holds the
// copy state) and its due entry, from publish through lease to ack (issue
// 10). In format 1 it was three, a copy record beside them.
func TestOneCopyMessageIsTwoKeys(t *testing.T) {
	r := newReplica(t)
	id := r.apply(publish("", 1000, 2000))[0].Published[0].MessageId
	if b, c, d := messageKeys(r); b != 1 || c != 0 || d != 1 {
		t.Fatalf("keys after publish: %d bodies, %d copies, %d due; want 1, 0, 1", b, c, d)
	}
	if got := r.apply(lease(id, 0, 2000, 5000))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("lease = %v, want OK", got)
	}
	if b, c, d := messageKeys(r); b != 1 || c != 0 || d != 1 {
		t.Fatalf("keys after lease: %d bodies, %d copies, %d due; want 1, 0, 1", b, c, d)
	}
	if cs := r.copyOf(id, DefaultGroup); cs.Attempt != 1 || !cs.Leased || cs.VisibleAtMs != 5000 || cs.Topic != "t" {
		t.Fatalf("copy after lease = %v, want attempt 1 leased until 5000 on topic t", cs)
	}
	// The lease wrote the body by appending the copy to its head: the
	// bytes are the body's deterministic encoding all the same.
	v, closer, err := r.s.db.Get(keys.Message(shard, id))
	if err != nil {
		t.Fatalf("Get(body) error = %v", err)
	}
	stored := bytes.Clone(v)
	closer.Close()
	if want, err := (proto.MarshalOptions{Deterministic: true}).Marshal(r.body(id)); err != nil || !bytes.Equal(stored, want) {
		t.Fatalf("body after lease = %x, want its encoding %x (%v)", stored, want, err)
	}
	if got := r.apply(ack(id, 1))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack = %v, want OK", got)
	}
	if b, c, d := messageKeys(r); b != 0 || c != 0 || d != 0 {
		t.Fatalf("keys after ack: %d bodies, %d copies, %d due; want none", b, c, d)
	}
	if c := r.counters("t", DefaultGroup); c.Pending != 0 || c.InFlight != 0 {
		t.Fatalf("counters after ack = %v, want zero", c)
	}
}

// A group created while a one-copy message waits gets no copy of it (only
// messages published after it), the message keeps its one copy in its
// body, and the next message has a copy record per group; each group's
// ack removes its own copy only, the last one the body.
func TestSecondGroupAfterOneCopyMessage(t *testing.T) {
	r := newReplica(t)
	first := r.apply(publish("", 100, 100))[0].Published[0].MessageId
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "billing"}}})
	second := r.apply(publish("", 100, 100))[0].Published[0].MessageId
	if b, c, d := messageKeys(r); b != 2 || c != 2 || d != 3 {
		t.Fatalf("keys: %d bodies, %d copies, %d due; want 2, 2 (the second message's), 3", b, c, d)
	}
	groupsOf := func(id []byte) []string {
		t.Helper()
		body := r.body(id)
		groups, _, err := Copies(r.s.db, shard, id, body)
		if err != nil {
			t.Fatalf("Copies() error = %v", err)
		}
		return groups
	}
	if got := fmt.Sprint(groupsOf(first)); got != "[default]" {
		t.Fatalf("groups of the first message = %s, want [default]", got)
	}
	if got := fmt.Sprint(groupsOf(second)); got != "[billing default]" {
		t.Fatalf("groups of the second message = %s, want [billing default]", got)
	}
	billingLease := func(id []byte) *fsmpb.Command {
		return &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: 100, Items: []*fsmpb.LeaseItem{{
			Ref: &fsmpb.MessageRef{MessageId: id, Group: "billing"}, VisibleAtMs: 100, DeadlineMs: 5000,
		}}}}}
	}
	billingAck := func(id []byte) *fsmpb.Command {
		return &fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: []*fsmpb.MessageRef{{MessageId: id, Group: "billing", Attempt: 1}}}}}
	}
	if got := r.apply(billingLease(first))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_NOT_FOUND {
		t.Fatalf("billing's lease of the first message = %v, want NOT_FOUND", got)
	}

	// The one-copy message goes with its only group's ack.
	r.apply(lease(first, 0, 100, 5000))
	if got := r.apply(ack(first, 1))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("ack of the first message = %v, want OK", got)
	}
	if r.has(keys.Message(shard, first)) {
		t.Fatalf("the first message's body is left after its only copy was acked")
	}

	// The two-copy message loses default's copy; the body stays for billing.
	r.apply(lease(second, 0, 100, 5000))
	r.apply(ack(second, 1))
	if got := fmt.Sprint(groupsOf(second)); got != "[billing]" {
		t.Fatalf("groups of the second message after default's ack = %s, want [billing]", got)
	}
	if got := r.body(second).GroupsPending; got != 1 {
		t.Fatalf("groups pending after default's ack = %d, want 1", got)
	}
	if got := r.apply(billingLease(second))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("billing's lease of the second message = %v, want OK", got)
	}
	if got := r.apply(billingAck(second))[0].Codes[0]; got != fsmpb.RefCode_REF_CODE_OK {
		t.Fatalf("billing's ack = %v, want OK", got)
	}
	if b, c, d := messageKeys(r); b != 0 || c != 0 || d != 0 {
		t.Fatalf("keys after every ack: %d bodies, %d copies, %d due; want none", b, c, d)
	}
	for _, g := range []string{DefaultGroup, "billing"} {
		if c := r.counters("t", g); c.Pending != 0 || c.InFlight != 0 {
			t.Fatalf("%s counters after every ack = %v, want zero", g, c)
		}
	}
}

// Deleting a topic's only group removes its one-copy messages whole.
func TestDeleteOnlyGroupRemovesOneCopyMessages(t *testing.T) {
	r := newReplica(t)
	r.apply(publish("", 100, 100, 200, 300))
	id := r.apply(publish("", 100, 400))[0].Published[0].MessageId
	r.apply(lease(id, 0, 400, 5000))
	del := &fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: DefaultGroup, Delete: true, Limit: 10}}}
	if got := r.apply(del)[0].Count; got != 4 {
		t.Fatalf("group delete removed %d copies, want 4", got)
	}
	if b, c, d := messageKeys(r); b != 0 || c != 0 || d != 0 {
		t.Fatalf("keys after deleting the only group: %d bodies, %d copies, %d due; want none", b, c, d)
	}
	if r.has(keys.Counter(shard, "t", DefaultGroup)) {
		t.Fatalf("the deleted group's counters are left")
	}
}

// toFormat1 rewrites every one-copy message of the shard as format 1 wrote
// it: the body without the inline copy, a CopyState record beside it.
func toFormat1(t *testing.T, db *pebble.DB) {
	t.Helper()
	prefix := keys.Message(shard, nil)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		t.Fatalf("NewIter() error = %v", err)
	}
	defer it.Close()
	b := db.NewBatch()
	defer b.Close()
	for valid := it.First(); valid; valid = it.Next() {
		body := &fsmpb.StoredMessage{}
		if err := proto.Unmarshal(it.Value(), body); err != nil {
			t.Fatalf("decode body: %v", err)
		}
		if body.InlineGroup == "" {
			continue
		}
		id, group, cs := it.Key()[len(prefix):], body.InlineGroup, inlineCopy(body)
		clearInline(body)
		for k, m := range map[string]proto.Message{string(it.Key()): body, string(keys.Copy(shard, id, group)): cs} {
			v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if err := b.Set([]byte(k), v, nil); err != nil {
				t.Fatalf("Set() error = %v", err)
			}
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatalf("Commit() error = %v", err)
	}
}

// A shard whose messages are in format 1 (a copy record per copy) answers
// every command exactly as one in format 2: two replicas apply the same
// seeded run (publishes with keys, TTLs and conflicts, leases, dead
// letters, acks, nacks, extends, cancels, reschedules, expiries, sweeps),
// one of them turned back to format 1 after every entry, and every entry's
// outcome, every copy and the counters agree. Once the run's messages are
// all gone, so are the two forms' differences: the shards are identical.
func TestFormat1CopiesAnswerAsFormat2(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			a, b := newReplica(t), newReplica(t)
			w := &workload{t: t, rng: rand.New(rand.NewPCG(seed, 10)), db: a.s.db, now: 1000, seen: map[string]int{}}
			next := uint64(1)
			converted := false // b held format-1 copy records at some point
			for range 150 {
				es := w.entries(next, 1+w.rng.IntN(3))
				next += uint64(len(es))
				gotA, err := a.s.Update(cloneEntries(es))
				if err != nil {
					t.Fatalf("Update(format 2) error = %v", err)
				}
				gotB, err := b.s.Update(cloneEntries(es))
				if err != nil {
					t.Fatalf("Update(format 1) error = %v", err)
				}
				for i := range gotA {
					if !bytes.Equal(gotA[i].Result.Data, gotB[i].Result.Data) {
						t.Fatalf("entry %d: outcome on format 1 differs from format 2", gotA[i].Index)
					}
				}
				w.learn(gotA)
				toFormat1(t, b.s.db)
				if _, c, _ := messageKeys(b); c > 0 {
					converted = true
				}
				for _, id := range w.ids {
					ca, _ := w.copyOf(id)
					_, cb, err := ReadCopy(b.s.db, shard, id, DefaultGroup)
					if err != nil || !proto.Equal(ca, cb) {
						t.Fatalf("copy of %x: format 1 %v (%v), format 2 %v", id, cb, err, ca)
					}
				}
				if ca, cb := a.counters("t", DefaultGroup), b.counters("t", DefaultGroup); !proto.Equal(ca, cb) {
					t.Fatalf("counters: format 1 %v, format 2 %v", cb, ca)
				}
			}
			if !converted || w.seen["lease OK"] == 0 || w.seen["ack OK"] == 0 || w.seen["publish KEY_OUTCOME_REPLACED"] == 0 {
				t.Fatalf("the run did too little to compare: %v", w.seen)
			}
			// Drain: cancel every message left and purge the dead letters,
			// so both shards hold only what outlives messages (key, end and
			// counter records).
			a.index, b.index = next-1, next-1
			for _, id := range w.ids {
				for _, r := range []*replica{a, b} {
					_, cs, err := ReadCopy(r.s.db, shard, id, DefaultGroup)
					if err != nil {
						t.Fatalf("ReadCopy() error = %v", err)
					}
					if cs != nil && cs.Leased {
						r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{NowMs: w.now, Refs: w.ref(id, cs.Attempt)}}})
					}
					r.apply(cmdChange(&fsmpb.Change{NowMs: w.now, MessageId: id, Cancel: true, DedupWindowMs: 300}))
				}
			}
			for _, r := range []*replica{a, b} {
				for _, topic := range []string{"t", "t" + DLQSuffix} {
					r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Purge{Purge: &fsmpb.Purge{Topic: topic, NowMs: w.now}}})
				}
			}
			if b1, c1, d1 := messageKeys(b); b1+c1+d1 != 0 {
				t.Fatalf("format-1 shard holds %d bodies, %d copies, %d due entries after the drain; want none", b1, c1, d1)
			}
			if !bytes.Equal(a.hash(), b.hash()) {
				t.Fatalf("shards differ once every message is gone")
			}
		})
	}
}

// Writing an inline copy back by appending its fields to the body's head
// gives exactly the bytes of encoding the whole body with the new copy,
// whatever the body holds and whichever copy fields are zero; a body not in
// field order, or with a field after the copy's, has no head.
func TestInlineSpliceEqualsMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	maybe := func(s string) string {
		if rng.IntN(2) == 0 {
			return ""
		}
		return s
	}
	copyState := func() *fsmpb.CopyState {
		return &fsmpb.CopyState{
			Attempt: uint32(rng.IntN(3)), VisibleAtMs: int64(rng.IntN(3)) * 1_700_000_000_000, Leased: rng.IntN(2) == 0,
			Reason: maybe("nacked: try later"),
		}
	}
	encode := func(m *fsmpb.StoredMessage) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal() error = %v", err)
		}
		return b
	}
	for i := range 500 {
		body := &fsmpb.StoredMessage{
			Topic: "orders", Partition: uint32(rng.IntN(3)), Payload: bytes.Repeat([]byte{'p'}, rng.IntN(300)),
			PublishedAtMs: 1_700_000_000_000, DueAtMs: int64(rng.IntN(2)) * 1_700_000_001_000, Key: maybe("k"),
			FairnessKey: maybe("tenant.a"), Priority: int32(rng.IntN(5) - 2), GroupsPending: 1,
			DedupWindowMs: int64(rng.IntN(2)) * 60_000, Fair: rng.IntN(2) == 0, Version: uint64(rng.IntN(3)),
			InlineGroup: "g",
		}
		if rng.IntN(2) == 0 {
			body.Headers = map[string]string{"a": "1", "b": maybe("2")}
		}
		old := copyState()
		setInline(body, old)
		v := encode(body)
		head := inlineHead(v, body, old)
		if head == nil {
			t.Fatalf("case %d: inlineHead(%v) = nil, want the head", i, body)
		}
		group, scanned, scannedHead, ok := scanInline(v)
		if !ok || group != "g" || !proto.Equal(scanned, inlineCopy(body)) || !bytes.Equal(scannedHead, head) {
			t.Fatalf("case %d: scanInline(%v) = %q, %v, %x, %v; want g, %v, %x", i, body, group, scanned, scannedHead, ok, inlineCopy(body), head)
		}
		next := copyState()
		got := appendInline(head, next)
		setInline(body, next)
		if want := encode(body); !bytes.Equal(got, want) {
			t.Fatalf("case %d: head + copy fields = %x, want %x", i, got, want)
		}
	}

	// A body that does not end with its copy fields, or holds a field this
	// binary does not know, has no head: it is encoded whole.
	m := &fsmpb.StoredMessage{Topic: "t", InlineGroup: "g", CopyAttempt: 1}
	cs := inlineCopy(m)
	late := protowire.AppendString(protowire.AppendTag(encode(m), 3, protowire.BytesType), "payload")
	if err := proto.Unmarshal(late, m); err != nil {
		t.Fatal(err)
	}
	if head := inlineHead(late, m, cs); head != nil {
		t.Fatalf("inlineHead(a payload after the copy fields) = %x, want nil", head)
	}
	if _, _, head, ok := scanInline(late); ok {
		t.Fatalf("scanInline(a payload after the copy fields) = %x, want not ok", head)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(encode(m), 99, protowire.VarintType), 1)
	m = &fsmpb.StoredMessage{}
	if err := proto.Unmarshal(unknown, m); err != nil {
		t.Fatal(err)
	}
	if head := inlineHead(unknown, m, inlineCopy(m)); head != nil {
		t.Fatalf("inlineHead(a field this binary does not know) = %x, want nil", head)
	}
	if _, _, head, ok := scanInline(unknown); ok {
		t.Fatalf("scanInline(a field this binary does not know) = %x, want not ok", head)
	}
	// Nor does a body whose copies are records of their own.
	if _, _, head, ok := scanInline(encode(&fsmpb.StoredMessage{Topic: "t", GroupsPending: 2})); ok {
		t.Fatalf("scanInline(a body without an inline copy) = %x, want not ok", head)
	}
}

// FuzzScanInline: scanInline never panics on stored bytes, and what it
// reads from a body it accepts is what decoding the body gives: the same
// inline group and copy, the head a prefix of the bytes.
func FuzzScanInline(f *testing.F) {
	for _, m := range []*fsmpb.StoredMessage{
		{Topic: "t", InlineGroup: "g", CopyAttempt: 2, CopyVisibleAtMs: 5000, CopyLeased: true, CopyReason: "r", Priority: -3},
		{Topic: "t", Payload: []byte("p"), Headers: map[string]string{"a": "1"}, InlineGroup: "g", Fair: true, FairnessKey: "x.y", Version: 7},
		{Topic: "t", GroupsPending: 2},
	} {
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		group, cs, head, ok := scanInline(v)
		if !ok {
			return
		}
		var body fsmpb.StoredMessage
		if err := proto.Unmarshal(v, &body); err != nil {
			return // e.g. a string that is not UTF-8: decoding refuses what the scan reads
		}
		if group != body.InlineGroup || !proto.Equal(cs, inlineCopy(&body)) || !bytes.HasPrefix(v, head) {
			t.Fatalf("scanInline(%x) = %q, %v, %x; decoding gives %q, %v", v, group, cs, head, body.InlineGroup, inlineCopy(&body))
		}
	})
}
