package fsm

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// body reads a message's stored body, as the dispatcher does before it
// leases a copy.
func (r *replica) body(id []byte) *fsmpb.StoredMessage {
	r.t.Helper()
	v, closer, err := r.s.db.Get(keys.Message(shard, id))
	if err != nil {
		r.t.Fatalf("read body: %v", err)
	}
	defer closer.Close()
	var m fsmpb.StoredMessage
	if err := proto.Unmarshal(v, &m); err != nil {
		r.t.Fatalf("decode body: %v", err)
	}
	return &m
}

// copyOf reads group's copy of a message, in either form.
func (r *replica) copyOf(id []byte, group string) *fsmpb.CopyState {
	r.t.Helper()
	_, cs, err := ReadCopy(r.s.db, shard, id, group)
	if err != nil || cs == nil {
		r.t.Fatalf("ReadCopy(%x, %s) = %v, %v; want a copy", id, group, cs, err)
	}
	return cs
}

func (r *replica) has(key []byte) bool {
	r.t.Helper()
	_, closer, err := r.s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false
	}
	if err != nil {
		r.t.Fatalf("Get() error = %v", err)
	}
	closer.Close()
	return true
}

// leaseAt leases a copy the way the dispatcher does: attempt and visible_at
// from the due index, version from the body it read the payload from.
func leaseAt(id []byte, attempt uint32, visibleAt int64, version uint64, nowMs, deadline int64) *fsmpb.Command {
	return &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: nowMs, Items: []*fsmpb.LeaseItem{{
		Ref:         &fsmpb.MessageRef{MessageId: id, Group: DefaultGroup, Attempt: attempt},
		VisibleAtMs: visibleAt, DeadlineMs: deadline, Version: version,
	}}}}}
}

// A keyed rewrite that leaves the due time as it was (DEBOUNCE at its
// max_wait cap, REPLACE with the same due) ordered between a round's read
// of the body and its lease: the lease must not commit, so the old payload
// is never delivered, and a lease naming the new contents does.
func TestRewriteFencesALeaseOfTheOldContents(t *testing.T) {
	tests := []struct {
		name   string
		first  *fsmpb.StoredMessage
		second *fsmpb.StoredMessage
		want   fsmpb.KeyOutcome
	}{
		{
			name:   "debounce at its cap",
			first:  &fsmpb.StoredMessage{Key: "k", Payload: []byte("old"), DueAtMs: 500, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE, MaxWaitMs: 400},
			second: &fsmpb.StoredMessage{Key: "k", Payload: []byte("new"), DueAtMs: 900, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE, MaxWaitMs: 400},
			want:   fsmpb.KeyOutcome_KEY_OUTCOME_DEBOUNCED,
		},
		{
			name:   "replace with the same due time",
			first:  &fsmpb.StoredMessage{Key: "k", Payload: []byte("old"), DueAtMs: 500},
			second: &fsmpb.StoredMessage{Key: "k", Payload: []byte("new"), DueAtMs: 500, OnConflict: fsmpb.KeyConflict_KEY_CONFLICT_REPLACE},
			want:   fsmpb.KeyOutcome_KEY_OUTCOME_REPLACED,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t)
			id := r.apply(cmdPublish(100, tt.first))[0].Published[0].MessageId
			// The round reads the copy's body: due at 500, version v0.
			read := r.body(id)
			if string(read.Payload) != "old" || read.DueAtMs != 500 {
				t.Fatalf("body before the rewrite = %v, want payload old due 500", read)
			}
			got := r.apply(cmdPublish(450, tt.second))[0].Published[0]
			if got.KeyOutcome != tt.want || got.DueAtMs != 500 {
				t.Fatalf("rewrite = %v, want %v due 500", got, tt.want)
			}
			if code := r.apply(leaseAt(id, 0, 500, read.Version, 500, 5000))[0].Codes[0]; code != fsmpb.RefCode_REF_CODE_STALE {
				t.Fatalf("lease of the contents read before the rewrite = %v, want STALE", code)
			}
			if c := r.counters("t", DefaultGroup); c.InFlight != 0 || c.Pending != 1 {
				t.Fatalf("counters after the stale lease = %v, want 1 pending, 0 in flight", c)
			}
			// The next round reads the new body, and its lease commits.
			now := r.body(id)
			if string(now.Payload) != "new" || now.Version == read.Version {
				t.Fatalf("body after the rewrite = %v, want payload new at a version other than %d", now, read.Version)
			}
			if cs := r.copyOf(id, DefaultGroup); cs.Version != now.Version {
				t.Fatalf("copy version = %d, want the body's %d", cs.Version, now.Version)
			}
			if code := r.apply(leaseAt(id, 0, 500, now.Version, 500, 5000))[0].Codes[0]; code != fsmpb.RefCode_REF_CODE_OK {
				t.Fatalf("lease of the new contents = %v, want OK", code)
			}
		})
	}
}

// A reschedule is a rewrite too: a lease of what was read before it fails
// even if the new due time equals the old one.
func TestRescheduleFencesALeaseOfTheOldContents(t *testing.T) {
	r := newReplica(t)
	id := r.apply(cmdPublish(100, &fsmpb.StoredMessage{Key: "k", Payload: []byte("x"), DueAtMs: 500}))[0].Published[0].MessageId
	read := r.body(id)
	if got := r.apply(cmdChange(&fsmpb.Change{NowMs: 450, Key: "k", DueAtMs: 500}))[0].Change.Code; got != fsmpb.ChangeCode_CHANGE_CODE_DONE {
		t.Fatalf("reschedule = %v, want DONE", got)
	}
	if code := r.apply(leaseAt(id, 0, 500, read.Version, 500, 5000))[0].Codes[0]; code != fsmpb.RefCode_REF_CODE_STALE {
		t.Fatalf("lease read before the reschedule = %v, want STALE", code)
	}
}
