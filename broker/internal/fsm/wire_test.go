package fsm

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

var updateWire = flag.Bool("update-wire", false, "rewrite testdata/wire.txt from the current encoding")

// wireSamples are one value of every persisted message, every field set.
// Their encoding is the on-disk format: Raft entries (Batch) and Pebble
// records (StoredMessage, CopyState, KeyRecord, EndRecord, Counters,
// DedupRecord), and the entry results (Outcomes).
func wireSamples() []struct {
	name string
	msg  proto.Message
} {
	ref := &fsmpb.MessageRef{MessageId: []byte("0123456789abcdef"), Group: "g1", Attempt: 3}
	outcome := &fsmpb.Outcome{
		Published:       []*fsmpb.PublishOutcome{{MessageId: []byte("0123456789abcdef"), DueAtMs: 1700000000123, KeyOutcome: fsmpb.KeyOutcome_KEY_OUTCOME_DEBOUNCED}},
		Codes:           []fsmpb.RefCode{fsmpb.RefCode_REF_CODE_OK, fsmpb.RefCode_REF_CODE_STALE},
		Change:          &fsmpb.ChangeResult{Code: fsmpb.ChangeCode_CHANGE_CODE_ALREADY_DELIVERED, MessageId: []byte("m"), DueAtMs: 9},
		Count:           7,
		More:            true,
		RequestIdReused: true,
	}
	stored := &fsmpb.StoredMessage{
		Topic: "orders", Partition: 5, Payload: []byte("payload"), Headers: map[string]string{"a": "1", "b": "2"},
		PublishedAtMs: 1700000000000, DueAtMs: 1700000001000, ExpiresAtMs: 1700000002000, Key: "k",
		FairnessKey: "tenant", Priority: -4, GroupsPending: 2, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_REPLACE,
		MaxWaitMs: 500, DedupWindowMs: 60000, Fair: true, Version: 11,
	}
	batch := &fsmpb.Batch{Commands: []*fsmpb.Command{
		{Kind: &fsmpb.Command_Publish{Publish: &fsmpb.Publish{RequestId: "req-1", NowMs: 1, Messages: []*fsmpb.StoredMessage{stored}, Digest: []byte{1, 2}}}},
		{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: 2, Items: []*fsmpb.LeaseItem{{Ref: ref, VisibleAtMs: 3, DeadlineMs: 4, Remove: true, DeadLetter: true, Version: 5}}}}},
		{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: []*fsmpb.MessageRef{ref}, NowMs: 6}}},
		{Kind: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Refs: []*fsmpb.MessageRef{ref}, VisibleAtMs: 7, Reason: "r", VisibleAtEachMs: []int64{8, 9}}}},
		{Kind: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Refs: []*fsmpb.MessageRef{ref}, DeadlineMs: 10}}},
		{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 11, NowMs: 12, Limit: 13}}},
		{Kind: &fsmpb.Command_Change{Change: &fsmpb.Change{NowMs: 14, MessageId: []byte("m"), Topic: "t", Key: "k", Cancel: true, DueAtMs: 15, DedupWindowMs: 16}}},
		{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: "t", Group: "g", Delete: true, Limit: 17}}},
		{Kind: &fsmpb.Command_Purge{Purge: &fsmpb.Purge{Topic: "t", Group: "g", Limit: 18, NowMs: 19}}},
		{Kind: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Topic: "t", Limit: 20, NowMs: 21}}},
		{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: 22, Limit: 23, MessageIds: [][]byte{[]byte("a"), []byte("b")}}}},
	}}
	return []struct {
		name string
		msg  proto.Message
	}{
		{"Batch", batch},
		{"StoredMessage", stored},
		// Format 2: a one-copy message's body with its copy inline.
		{"StoredMessageInline", &fsmpb.StoredMessage{
			Topic: "orders", Payload: []byte("p"), DueAtMs: 1700000001000, GroupsPending: 1, Version: 3,
			InlineGroup: "g1", CopyAttempt: 2, CopyVisibleAtMs: 1700000031000, CopyLeased: true, CopyReason: "r",
		}},
		{"CopyState", &fsmpb.CopyState{Reason: "r", Fair: true, FairnessKey: "f", Attempt: 2, VisibleAtMs: 3, Leased: true, Priority: -1, Partition: 4, Topic: "t", Version: 5}},
		{"KeyRecord", &fsmpb.KeyRecord{MessageId: []byte("m"), End: fsmpb.EndState_END_STATE_CANCELLED, ForgetAtMs: 6, DueCapMs: 7}},
		{"EndRecord", &fsmpb.EndRecord{End: fsmpb.EndState_END_STATE_DEAD_LETTERED, ForgetAtMs: 8}},
		{"Counters", &fsmpb.Counters{Pending: 9, InFlight: 10, DeadLettered: 11}},
		{"DedupRecord", &fsmpb.DedupRecord{AppliedAtMs: 12, Outcome: outcome, Digest: []byte{3}}},
		{"Outcomes", &fsmpb.Outcomes{Outcomes: []*fsmpb.Outcome{outcome}}},
		// The hand-over fence (issue 19): its command and its answers.
		{"BatchFence", &fsmpb.Batch{Commands: []*fsmpb.Command{
			{Kind: &fsmpb.Command_Fence{Fence: &fsmpb.Fence{Topic: "t", Partition: 24, Partitions: 25, Lift: true}}},
		}}},
		{"OutcomesFence", &fsmpb.Outcomes{Outcomes: []*fsmpb.Outcome{{KeysHeld: true}, {Fenced: &fsmpb.FencedPartition{Topic: "t", Partition: 26}}}}},
	}
}

// TestWireFormat pins the encoding of every persisted message to
// testdata/wire.txt, recorded before the protos moved from the proto module
// into the broker: a data dir or Raft log written by an older broker must
// decode the same. A change here is a format change (see FormatVersion).
func TestWireFormat(t *testing.T) {
	var got strings.Builder
	for _, s := range wireSamples() {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.msg)
		if err != nil {
			t.Fatalf("Marshal(%s): %v", s.name, err)
		}
		fmt.Fprintf(&got, "%s %s\n", s.name, hex.EncodeToString(b))
		back := s.msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", s.name, err)
		}
		if !proto.Equal(back, s.msg) {
			t.Errorf("Unmarshal(Marshal(%s)) = %v, want %v", s.name, back, s.msg)
		}
	}
	const path = "testdata/wire.txt"
	if *updateWire {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("encoding changed:\n got: %s\nwant: %s", got.String(), want)
	}
}
