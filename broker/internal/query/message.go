package query

import (
	"slices"
	"strings"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// CopyState is where one group's copy of a message stands at the
// Reader's clock reading.
type CopyState int

// The states of a copy.
const (
	// Scheduled: not due yet.
	Scheduled CopyState = iota
	// Ready: due, waiting for a consumer (a lease that ran out counts).
	Ready
	// InFlight: leased to a consumer whose lease has not run out.
	InFlight
)

// Copy is one group's copy of a message.
type Copy struct {
	Group       string
	State       CopyState
	Attempt     uint32
	VisibleAtMs int64
}

// Message is a pending message with its copies, in group order.
type Message struct {
	ID            []byte
	Topic         string
	Key           string
	Payload       []byte
	Headers       map[string]string
	PublishedAtMs int64
	DueAtMs       int64
	ExpiresAtMs   int64
	FairnessKey   string
	Priority      int32
	Copies        []Copy
}

// Message answers the message with id (16 bytes), nil if it is gone.
func (r *Reader) Message(id []byte) (*Message, error) {
	var m fsmpb.StoredMessage
	if found, err := r.get(keys.Message(r.shard, id), &m); err != nil || !found {
		return nil, err
	}
	out := &Message{
		// id may alias an iterator's key buffer (List): keep a copy.
		ID: slices.Clone(id), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers,
		PublishedAtMs: m.PublishedAtMs, DueAtMs: m.DueAtMs, ExpiresAtMs: m.ExpiresAtMs,
		FairnessKey: m.FairnessKey, Priority: m.Priority,
	}
	groups, states, err := fsm.Copies(r.db, r.shard, id, &m)
	for i, cs := range states {
		state := Scheduled
		switch {
		case cs.Leased && cs.VisibleAtMs > r.nowMs:
			state = InFlight
		case cs.VisibleAtMs <= r.nowMs:
			state = Ready
		}
		out.Copies = append(out.Copies, Copy{Group: groups[i], State: state, Attempt: cs.Attempt, VisibleAtMs: cs.VisibleAtMs})
	}
	return out, err
}

// MessageByKey answers the pending message that holds key in topic, nil
// if no pending message does (the key is free or only remembered for
// dedup).
func (r *Reader) MessageByKey(topic, key string) (*Message, error) {
	id, err := r.pendingID(keys.Key(r.shard, topic, key))
	if err != nil || id == nil {
		return nil, err
	}
	return r.Message(id)
}

// pendingID answers the message id of the key record at k if it is
// pending, nil otherwise.
func (r *Reader) pendingID(k []byte) ([]byte, error) {
	var rec fsmpb.KeyRecord
	found, err := r.get(k, &rec)
	if err != nil || !found || rec.End != fsmpb.EndState_END_STATE_PENDING {
		return nil, err
	}
	return rec.MessageId, nil
}

// Filter selects messages by key prefix, one header's value and due time.
type Filter struct {
	// KeyPrefix: the message key starts with it (empty: any, keyless too).
	KeyPrefix string
	// HeaderKey, if set, must be present with the value HeaderValue.
	HeaderKey, HeaderValue string
	// FromMs and ToMs bound the message's due time to [FromMs, ToMs);
	// 0 leaves that side open.
	FromMs, ToMs int64
}

func (f Filter) matches(m *Message) bool {
	if f.HeaderKey != "" && m.Headers[f.HeaderKey] != f.HeaderValue {
		return false
	}
	return strings.HasPrefix(m.Key, f.KeyPrefix)
}

func (f Filter) dueInRange(dueMs int64) bool {
	return (f.FromMs == 0 || dueMs >= f.FromMs) && (f.ToMs == 0 || dueMs < f.ToMs)
}
