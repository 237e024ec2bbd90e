package fsm

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
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
	ref := &raftv1.MessageRef{MessageId: []byte("0123456789abcdef"), Group: "g1", Attempt: 3}
	outcome := &raftv1.Outcome{
		Published:       []*raftv1.PublishOutcome{{MessageId: []byte("0123456789abcdef"), DueAtMs: 1700000000123, KeyOutcome: raftv1.KeyOutcome_KEY_OUTCOME_DEBOUNCED}},
		Codes:           []raftv1.RefCode{raftv1.RefCode_REF_CODE_OK, raftv1.RefCode_REF_CODE_STALE},
		Change:          &raftv1.ChangeResult{Code: raftv1.ChangeCode_CHANGE_CODE_ALREADY_DELIVERED, MessageId: []byte("m"), DueAtMs: 9},
		Count:           7,
		More:            true,
		RequestIdReused: true,
	}
	stored := &raftv1.StoredMessage{
		Topic: "orders", Partition: 5, Payload: []byte("payload"), Headers: map[string]string{"a": "1", "b": "2"},
		PublishedAtMs: 1700000000000, DueAtMs: 1700000001000, ExpiresAtMs: 1700000002000, Key: "k",
		FairnessKey: "tenant", Priority: -4, GroupsPending: 2, OnConflict: raftv1.KeyConflict_KEY_CONFLICT_REPLACE,
		MaxWaitMs: 500, DedupWindowMs: 60000, Fair: true, Version: 11,
	}
	batch := &raftv1.Batch{Commands: []*raftv1.Command{
		{Kind: &raftv1.Command_Publish{Publish: &raftv1.Publish{RequestId: "req-1", NowMs: 1, Messages: []*raftv1.StoredMessage{stored}, Digest: []byte{1, 2}}}},
		{Kind: &raftv1.Command_Lease{Lease: &raftv1.Lease{NowMs: 2, Items: []*raftv1.LeaseItem{{Ref: ref, VisibleAtMs: 3, DeadlineMs: 4, Remove: true, DeadLetter: true, Version: 5}}}}},
		{Kind: &raftv1.Command_Ack{Ack: &raftv1.Ack{Refs: []*raftv1.MessageRef{ref}, NowMs: 6}}},
		{Kind: &raftv1.Command_Nack{Nack: &raftv1.Nack{Refs: []*raftv1.MessageRef{ref}, VisibleAtMs: 7, Reason: "r", VisibleAtEachMs: []int64{8, 9}}}},
		{Kind: &raftv1.Command_Extend{Extend: &raftv1.Extend{Refs: []*raftv1.MessageRef{ref}, DeadlineMs: 10}}},
		{Kind: &raftv1.Command_Sweep{Sweep: &raftv1.Sweep{BeforeMs: 11, NowMs: 12, Limit: 13}}},
		{Kind: &raftv1.Command_Change{Change: &raftv1.Change{NowMs: 14, MessageId: []byte("m"), Topic: "t", Key: "k", Cancel: true, DueAtMs: 15, DedupWindowMs: 16}}},
		{Kind: &raftv1.Command_Group{Group: &raftv1.Group{Topic: "t", Group: "g", Delete: true, Limit: 17}}},
		{Kind: &raftv1.Command_Purge{Purge: &raftv1.Purge{Topic: "t", Group: "g", Limit: 18, NowMs: 19}}},
		{Kind: &raftv1.Command_Redrive{Redrive: &raftv1.Redrive{Topic: "t", Limit: 20, NowMs: 21}}},
		{Kind: &raftv1.Command_Expire{Expire: &raftv1.Expire{NowMs: 22, Limit: 23, MessageIds: [][]byte{[]byte("a"), []byte("b")}}}},
	}}
	return []struct {
		name string
		msg  proto.Message
	}{
		{"Batch", batch},
		{"StoredMessage", stored},
		{"CopyState", &raftv1.CopyState{Reason: "r", Fair: true, FairnessKey: "f", Attempt: 2, VisibleAtMs: 3, Leased: true, Priority: -1, Partition: 4, Topic: "t", Version: 5}},
		{"KeyRecord", &raftv1.KeyRecord{MessageId: []byte("m"), End: raftv1.EndState_END_STATE_CANCELLED, ForgetAtMs: 6, DueCapMs: 7}},
		{"EndRecord", &raftv1.EndRecord{End: raftv1.EndState_END_STATE_DEAD_LETTERED, ForgetAtMs: 8}},
		{"Counters", &raftv1.Counters{Pending: 9, InFlight: 10, DeadLettered: 11}},
		{"DedupRecord", &raftv1.DedupRecord{AppliedAtMs: 12, Outcome: outcome, Digest: []byte{3}}},
		{"Outcomes", &raftv1.Outcomes{Outcomes: []*raftv1.Outcome{outcome}}},
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
