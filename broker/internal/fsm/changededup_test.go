package fsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// storedBody is the stored body of message id, and whether it is stored
// (the message is pending).
func (r *replica) storedBody(id []byte) (*fsmpb.StoredMessage, bool) {
	r.t.Helper()
	v, closer, err := r.s.db.Get(keys.Message(shard, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		r.t.Fatalf("Get(body) error = %v", err)
	}
	defer closer.Close()
	var m fsmpb.StoredMessage
	if err := proto.Unmarshal(v, &m); err != nil {
		r.t.Fatalf("decode body: %v", err)
	}
	return &m, true
}

// changeWithID is a change by key of "k" carrying a request id and digest.
func changeWithID(nowMs int64, reqID, digest string, cancel bool, dueAtMs int64) *fsmpb.Command {
	return cmdChange(&fsmpb.Change{NowMs: nowMs, Key: "k", Cancel: cancel, DueAtMs: dueAtMs, DedupWindowMs: 1000, RequestId: reqID, Digest: []byte(digest)})
}

// TestChangeRetryAnswersTheFirstOutcome is chaos finding C: a change by key
// whose first attempt applied, retried with the same request id after a
// new message was published under the key, answers the first attempt's
// outcome (naming the first message) and leaves the new message alone.
// Without the request id the retry changed the new message.
func TestChangeRetryAnswersTheFirstOutcome(t *testing.T) {
	tests := []struct {
		name   string
		cancel bool
		due    int64
	}{
		{"cancel", true, 0},
		{"reschedule", false, 5000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplica(t)
			keyed := func() *fsmpb.StoredMessage {
				return &fsmpb.StoredMessage{Key: "k", DueAtMs: 2000, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_REPLACE}
			}
			first := r.apply(cmdPublish(100, keyed()))[0].Published[0].MessageId
			answer := r.apply(changeWithID(200, "chg-1", "D", tc.cancel, tc.due))[0]
			if got := answer.GetChange(); got.GetCode() != fsmpb.ChangeCode_CHANGE_CODE_DONE || !bytes.Equal(got.GetMessageId(), first) {
				t.Fatalf("first attempt = %v, want DONE for the first message", answer)
			}
			if !tc.cancel {
				// The first message ends (cancelled without a request id),
				// so the key takes a new message.
				r.apply(cmdChange(&fsmpb.Change{NowMs: 250, MessageId: first, Cancel: true}))
			}
			second := r.apply(cmdPublish(300, keyed()))[0].Published[0]
			if second.KeyOutcome != fsmpb.KeyOutcome_KEY_OUTCOME_CREATED || bytes.Equal(second.MessageId, first) {
				t.Fatalf("publish under the key after the change = %v, want a new message", second)
			}
			before := r.keyCount()

			retry := r.apply(changeWithID(400, "chg-1", "D", tc.cancel, tc.due))[0]
			if !proto.Equal(retry, answer) {
				t.Errorf("retried %s = %v, want the first outcome %v", tc.name, retry, answer)
			}
			body, pending := r.storedBody(second.MessageId)
			if !pending || body.DueAtMs != second.DueAtMs {
				t.Errorf("second message after the retry: pending %v, body %v; want pending, due %d", pending, body, second.DueAtMs)
			}
			if after := r.keyCount(); after != before {
				t.Errorf("retried %s changed the key count from %d to %d", tc.name, before, after)
			}
		})
	}
}

// TestChangeRequestIDReusedIsRefused: a change id applied before for
// another change (another digest), or for a publish, is refused and
// changes nothing; so is a publish reusing a change's id.
func TestChangeRequestIDReusedIsRefused(t *testing.T) {
	r := newReplica(t)
	id := r.apply(cmdPublish(100, &fsmpb.StoredMessage{Key: "k", DueAtMs: 2000}))[0].Published[0].MessageId
	r.apply(publish("pub-1", 100, 3000))
	first := r.apply(changeWithID(200, "chg-1", "reschedule k to 5000", false, 5000))[0]
	if first.GetChange().GetCode() != fsmpb.ChangeCode_CHANGE_CODE_DONE {
		t.Fatalf("first change = %v, want DONE", first)
	}
	before := r.keyCount()
	tests := []struct {
		name string
		cmd  *fsmpb.Command
	}{
		{"change with another digest", changeWithID(300, "chg-1", "cancel k", true, 0)},
		{"change without a digest", changeWithID(300, "chg-1", "", true, 0)},
		{"change reusing a publish id", changeWithID(300, "pub-1", "cancel k", true, 0)},
		{"publish reusing a change id", publish("chg-1", 300, 4000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := r.apply(tc.cmd)[0]
			if want := (&fsmpb.Outcome{RequestIdReused: true}); !proto.Equal(got, want) {
				t.Errorf("apply(%s) = %v, want %v", tc.name, got, want)
			}
			if after := r.keyCount(); after != before {
				t.Errorf("apply(%s) changed the key count from %d to %d", tc.name, before, after)
			}
		})
	}
	if body, pending := r.storedBody(id); !pending || body.DueAtMs != 5000 {
		t.Errorf("message after the refused requests: pending %v, body %v; want pending, due 5000", pending, body)
	}
}

// TestChangeDedupRecordIsSwept: a change with a request id writes a dedup
// record and its age entry, a sweep past the dedup window forgets both,
// and the id then names a new request.
func TestChangeDedupRecordIsSwept(t *testing.T) {
	const dedup, dedupAt = 'r', 'q'
	r := newReplica(t)
	first := r.apply(cmdPublish(100, &fsmpb.StoredMessage{Key: "k", DueAtMs: 2000}))[0].Published[0].MessageId
	r.apply(changeWithID(200, "chg-1", "D", true, 0))
	if got := tagsOf(r); got[dedup] != 1 || got[dedupAt] != 1 {
		t.Fatalf("keys after a change with a request id: %d dedup, %d dedup-age; want 1, 1", got[dedup], got[dedupAt])
	}
	r.apply(cmdChange(&fsmpb.Change{NowMs: 250, Key: "other", Cancel: true})) // no request id
	if got := tagsOf(r); got[dedup] != 1 || got[dedupAt] != 1 {
		t.Fatalf("keys after a change without a request id: %d dedup, %d dedup-age; want 1, 1", got[dedup], got[dedupAt])
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 200, NowMs: 1100}}})
	if got := tagsOf(r); got[dedup] != 1 || got[dedupAt] != 1 {
		t.Fatalf("keys after a sweep before the record: %d dedup, %d dedup-age; want 1, 1", got[dedup], got[dedupAt])
	}
	r.apply(&fsmpb.Command{Kind: &fsmpb.Command_Sweep{Sweep: &fsmpb.Sweep{BeforeMs: 1300, NowMs: 1300}}})
	if got := tagsOf(r); got[dedup] != 0 || got[dedupAt] != 0 {
		t.Fatalf("keys after a sweep past the window: %d dedup, %d dedup-age; want 0, 0", got[dedup], got[dedupAt])
	}
	second := r.apply(cmdPublish(1400, &fsmpb.StoredMessage{Key: "k", DueAtMs: 2000}))[0].Published[0].MessageId
	if bytes.Equal(second, first) {
		t.Fatalf("publish after the window = the first message's id, want a new message")
	}
	got := r.apply(changeWithID(1500, "chg-1", "D", true, 0))[0].GetChange()
	if got.GetCode() != fsmpb.ChangeCode_CHANGE_CODE_DONE || !bytes.Equal(got.GetMessageId(), second) {
		t.Fatalf("change with the swept id = %v, want DONE for the new message", got)
	}
}
