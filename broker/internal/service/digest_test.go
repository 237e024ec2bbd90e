package service

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func batchOf(ms ...*sundialv1.Message) []*brokerv1.PartitionedMessage {
	out := make([]*brokerv1.PartitionedMessage, len(ms))
	for i, m := range ms {
		out[i] = &brokerv1.PartitionedMessage{Message: m}
	}
	return out
}

func TestPublishDigest(t *testing.T) {
	base := func() *sundialv1.Message {
		return &sundialv1.Message{
			Topic: "t", Payload: []byte("p"), Headers: map[string]string{"a": "1", "b": "2", "c": "3"},
			DelayMs: 5, TtlMs: 7, Key: "k", FairnessKey: "f", Priority: 2,
			OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_REPLACE, MaxWaitMs: 9,
		}
	}
	want := publishDigest(batchOf(base(), base()))
	same := []struct {
		name string
		msgs []*brokerv1.PartitionedMessage
	}{
		{"same messages", batchOf(base(), base())},
		{"other partition", []*brokerv1.PartitionedMessage{{Message: base(), Partition: 3}, {Message: base(), Partition: 1}}},
	}
	for _, tc := range same {
		if got := publishDigest(tc.msgs); !bytes.Equal(got, want) {
			t.Errorf("publishDigest(%s) = %x, want %x", tc.name, got, want)
		}
	}
	edit := func(f func(m *sundialv1.Message)) []*brokerv1.PartitionedMessage {
		m := base()
		f(m)
		return batchOf(base(), m)
	}
	differ := []struct {
		name string
		msgs []*brokerv1.PartitionedMessage
	}{
		{"one message fewer", batchOf(base())},
		{"topic", edit(func(m *sundialv1.Message) { m.Topic = "u" })},
		{"payload", edit(func(m *sundialv1.Message) { m.Payload = []byte("q") })},
		{"payload moved into the key", edit(func(m *sundialv1.Message) { m.Key, m.Payload = "kp", nil })},
		{"header value", edit(func(m *sundialv1.Message) { m.Headers["b"] = "x" })},
		{"header dropped", edit(func(m *sundialv1.Message) { delete(m.Headers, "c") })},
		{"delay", edit(func(m *sundialv1.Message) { m.DelayMs = 6 })},
		{"delay as deliver-at", edit(func(m *sundialv1.Message) { m.DelayMs, m.DeliverAtUnixMs = 0, 5 })},
		{"ttl", edit(func(m *sundialv1.Message) { m.TtlMs = 8 })},
		{"key", edit(func(m *sundialv1.Message) { m.Key = "j" })},
		{"fairness key", edit(func(m *sundialv1.Message) { m.FairnessKey = "g" })},
		{"priority", edit(func(m *sundialv1.Message) { m.Priority = 3 })},
		{"on conflict", edit(func(m *sundialv1.Message) { m.OnKeyConflict = sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE })},
		{"max wait", edit(func(m *sundialv1.Message) { m.MaxWaitMs = 10 })},
	}
	for _, tc := range differ {
		if got := publishDigest(tc.msgs); bytes.Equal(got, want) {
			t.Errorf("publishDigest(%s) = the unedited batch's digest %x, want another", tc.name, got)
		}
	}
}

// TestPublishDigestCoversEveryField: publishDigest names the 11 fields of
// sundialv1.Message; a new field must be digested (and counted here).
func TestPublishDigestCoversEveryField(t *testing.T) {
	if n := (&sundialv1.Message{}).ProtoReflect().Descriptor().Fields().Len(); n != 12 {
		t.Fatalf("sundialv1.Message has %d fields, publishDigest digests 12: add the new ones", n)
	}
}

// BenchmarkPublishDigest: 100 messages of 100 bytes with a key and a
// header, the batch of BenchmarkApplyLifecycle.
func BenchmarkPublishDigest(b *testing.B) {
	msgs := make([]*sundialv1.Message, 100)
	for i := range msgs {
		msgs[i] = &sundialv1.Message{Topic: "bench", Key: fmt.Sprint("key-", i), Payload: make([]byte, 100), Headers: map[string]string{"trace": "abc"}}
	}
	batch := batchOf(msgs...)
	b.ReportAllocs()
	b.SetBytes(100 * 100)
	for b.Loop() {
		publishDigest(batch)
	}
}

// BenchmarkSHA256 is the floor for BenchmarkPublishDigest on this machine.
func BenchmarkSHA256(b *testing.B) {
	buf := make([]byte, 100*100)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		sha256.Sum256(buf)
	}
}

// A message's text is its payload in plain text: both spellings of one
// message have one digest, so a retry may use either.
func TestPublishDigestTextIsPayload(t *testing.T) {
	text := publishDigest(batchOf(&sundialv1.Message{Topic: "t", Text: "hello"}))
	payload := publishDigest(batchOf(&sundialv1.Message{Topic: "t", Payload: []byte("hello")}))
	other := publishDigest(batchOf(&sundialv1.Message{Topic: "t", Text: "hullo"}))
	if !bytes.Equal(text, payload) || bytes.Equal(text, other) {
		t.Fatalf("digests: text %x, payload %x, other text %x; want text = payload != other", text, payload, other)
	}
}

// TestChangeDigest: every attempt of one change digests alike (whatever
// the shard, partition or request id), and changes that do something else
// digest apart, so a reused request id is told from a retry.
func TestChangeDigest(t *testing.T) {
	key := func(k string) *sundialv1.MessageSelector {
		return &sundialv1.MessageSelector{Topic: "t", By: &sundialv1.MessageSelector_Key{Key: k}}
	}
	req := func(sel *sundialv1.MessageSelector, delayMs, atMs int64) *brokerv1.ShardChangeRequest {
		return &brokerv1.ShardChangeRequest{Message: sel, DelayMs: delayMs, DeliverAtUnixMs: atMs}
	}
	want := changeDigest(req(key("k"), 5, 0), false)
	moved := req(key("k"), 5, 0)
	moved.ShardId, moved.Partition, moved.RequestId = 7, 3, "r-2"
	if got := changeDigest(moved, false); !bytes.Equal(got, want) {
		t.Errorf("changeDigest(other shard, partition, id) = %x, want %x", got, want)
	}
	byID := &sundialv1.MessageSelector{Topic: "t", By: &sundialv1.MessageSelector_MessageId{MessageId: "k"}}
	other := &sundialv1.MessageSelector{Topic: "u", By: &sundialv1.MessageSelector_Key{Key: "k"}}
	seen := map[string]string{string(want): "reschedule k by 5"}
	for _, tc := range []struct {
		name   string
		req    *brokerv1.ShardChangeRequest
		cancel bool
	}{
		{"cancel k", req(key("k"), 0, 0), true},
		{"reschedule k now", req(key("k"), 0, 0), false},
		{"reschedule k by 6", req(key("k"), 6, 0), false},
		{"reschedule k at 5", req(key("k"), 0, 5), false},
		{"reschedule id k by 5", req(byID, 5, 0), false},
		{"reschedule k of u by 5", req(other, 5, 0), false},
		{"reschedule k2 by 5", req(key("k2"), 5, 0), false},
	} {
		got := string(changeDigest(tc.req, tc.cancel))
		if prev, dup := seen[got]; dup {
			t.Errorf("changeDigest(%s) = changeDigest(%s), want them apart", tc.name, prev)
		}
		seen[got] = tc.name
	}
	// A cancel has no due time: a delay sent along does not count.
	if a, b := changeDigest(req(key("k"), 5, 0), true), changeDigest(req(key("k"), 0, 0), true); !bytes.Equal(a, b) {
		t.Errorf("changeDigest(cancel k with a delay) = %x, want changeDigest(cancel k) %x", a, b)
	}
}
