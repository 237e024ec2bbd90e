package fsm

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// A group's copy of a message is stored in one of two forms. A message
// stored with a single copy (its topic had one group on this shard, or a
// redriven dead letter, which goes back to one group) keeps that copy's
// state inside its body: StoredMessage.inline_group names the group and the
// copy_* fields hold what the body does not already have (format 2). Such a
// message is two keys, the body and its due entry, instead of three. A
// message stored with several copies, and every message written in format 1,
// keeps each copy in a CopyState record of its own (keys.Copy), its body's
// inline_group empty. A message never changes form: groups created later
// get no copy of it, and its copies only ever go.
//
// ReadCopy and Copies read both forms; they are the only readers of copy
// state, for the state machine, the dispatcher and the query package alike.

// ReadCopy reads group's copy of message id from r (the DB, a snapshot or an
// indexed batch), in either form, and the body it belongs to. The copy is
// nil when the message or that group's copy is gone (the body may still be
// there, for the other groups).
func ReadCopy(r pebble.Reader, shard uint64, id []byte, group string) (*fsmpb.StoredMessage, *fsmpb.CopyState, error) {
	c, err := readCopy(r, nil, shard, id, group, readDecoded)
	if err != nil || c == nil {
		return nil, nil, err
	}
	return c.body, c.cs, nil
}

// readMode says how readCopy reads a body with an inline copy.
type readMode int

const (
	// readDecoded decodes the body.
	readDecoded readMode = iota
	// readForRewrite scans the encoding (scanBody) for the copy and keeps
	// the body's encoding without its copy fields (see inlineHead), so
	// that writing the copy back does not encode the whole body again.
	readForRewrite
	// readForDrop scans the encoding for the copy and what deleting the
	// body needs (bodyEnd): an ack never decodes the payload and headers
	// it deletes.
	readForDrop
)

// readCopy reads group's copy of message id from r as ReadCopy does, the
// body through bodies if not nil (see bodyIter); nil if the message is
// gone, a copy with a nil cs if only that group's copy is. A copy read by
// scanning (see readMode) answers no body: its head or its end stands in
// for it.
func readCopy(r pebble.Reader, bodies getter, shard uint64, id []byte, group string, mode readMode) (*groupCopy, error) {
	if len(id) != keys.IDBytes {
		return nil, nil
	}
	if bodies == nil {
		bodies = r
	}
	v, closer, err := bodies.Get(keys.Message(shard, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	if mode != readDecoded {
		// A body of several pending groups keeps no copy inline; if one
		// did, decoding it keeps dropCopy's rewrite of groups_pending.
		if s, ok := scanBody(v, mode == readForRewrite); ok && (mode != readForDrop || s.end.groupsPending <= 1) {
			if s.group != group {
				return nil, nil
			}
			c := &groupCopy{id: id, group: group, cs: s.cs, head: s.head}
			if mode == readForDrop {
				c.end = &s.end
			}
			return c, nil
		}
	}
	body := &fsmpb.StoredMessage{}
	if err := proto.Unmarshal(v, body); err != nil {
		return nil, fmt.Errorf("decode %T: %w", body, err)
	}
	c := &groupCopy{id: id, group: group, body: body}
	if body.InlineGroup != "" {
		if body.InlineGroup != group {
			return c, nil
		}
		c.cs = inlineCopy(body)
		if mode == readForRewrite {
			c.head = inlineHead(v, body, c.cs)
		}
		return c, nil
	}
	cs := &fsmpb.CopyState{}
	if found, err := getRecord(r, keys.Copy(shard, id, group), cs); err != nil || !found {
		return c, err
	}
	c.cs = cs
	return c, nil
}

// Copies reads every group's copy of message id, whose body (read from r
// before) is body, in group order.
func Copies(r pebble.Reader, shard uint64, id []byte, body *fsmpb.StoredMessage) (groups []string, states []*fsmpb.CopyState, err error) {
	if body.InlineGroup != "" {
		return []string{body.InlineGroup}, []*fsmpb.CopyState{inlineCopy(body)}, nil
	}
	prefix := keys.CopyPrefix(shard, id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, nil, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, errors.Join(err, it.Close())
		}
		cs := &fsmpb.CopyState{}
		if err := proto.Unmarshal(v, cs); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("decode %T: %w", cs, err), it.Close())
		}
		groups = append(groups, keys.GroupOfCopy(it.Key()))
		states = append(states, cs)
	}
	return groups, states, errors.Join(it.Error(), it.Close())
}

// inlineCopy is the copy state a body keeps inline.
func inlineCopy(body *fsmpb.StoredMessage) *fsmpb.CopyState {
	return &fsmpb.CopyState{
		Reason: body.CopyReason, Fair: body.Fair, FairnessKey: body.FairnessKey,
		Attempt: body.CopyAttempt, VisibleAtMs: body.CopyVisibleAtMs, Leased: body.CopyLeased,
		Priority: body.Priority, Partition: body.Partition, Topic: body.Topic, Version: body.Version,
	}
}

// setInline stores cs in body as its inline copy. Topic, partition, fair
// flag, priority, fairness key and version are the body's own: every
// writer of a copy keeps them equal to the body's (see rewrite).
func setInline(body *fsmpb.StoredMessage, cs *fsmpb.CopyState) {
	body.CopyAttempt, body.CopyVisibleAtMs, body.CopyLeased, body.CopyReason = cs.Attempt, cs.VisibleAtMs, cs.Leased, cs.Reason
}

// Field numbers of StoredMessage (fsm.proto) that scanBody reads; the
// inline copy fields are its last ones, so a deterministic encoding ends
// with them.
const (
	fieldTopic           = 1
	fieldPartition       = 2
	fieldExpiresAtMs     = 7
	fieldKey             = 8
	fieldFairnessKey     = 9
	fieldPriority        = 10
	fieldGroupsPending   = 11
	fieldDedupWindowMs   = 14
	fieldFair            = 15
	fieldVersion         = 16
	fieldInlineGroup     = 17
	fieldCopyAttempt     = 18
	fieldCopyVisibleAtMs = 19
	fieldCopyLeased      = 20
	fieldCopyReason      = 21
)

// inlineHead is a copy of v, the encoding of body whose inline copy is cs,
// without the copy fields, with room to append them again (appendInline);
// nil if v does not end with them as appendInline writes them, or body
// holds fields this binary does not know. The state machine encodes a body
// deterministically, in field-number order, and the copy fields are the
// last ones: the head is every other field, byte for byte as encoded.
func inlineHead(v []byte, body *fsmpb.StoredMessage, cs *fsmpb.CopyState) []byte {
	if len(body.ProtoReflect().GetUnknown()) > 0 {
		return nil
	}
	var buf [64]byte
	tail := appendInline(buf[:0], cs)
	if !bytes.HasSuffix(v, tail) {
		return nil
	}
	end := len(v) - len(tail)
	head := make([]byte, end, end+len(tail)+16)
	copy(head, v)
	return head
}

// scanInline reads the inline copy of the body encoded in v, and its head
// (as inlineHead), from the fields a copy needs, without decoding the
// payload and headers. ok is false (decode the body instead) if the body
// keeps no copy inline, or is not encoded as the state machine writes it:
// known fields of the expected wire types, the copy fields last.
func scanInline(v []byte) (group string, cs *fsmpb.CopyState, head []byte, ok bool) {
	s, ok := scanBody(v, true)
	return s.group, s.cs, s.head, ok
}

// bodyEnd is what deleting a message's body needs of it besides its copy
// (see dropBody): an ack reads it by scanning the body's encoding instead
// of decoding the payload and headers it is about to delete.
type bodyEnd struct {
	groupsPending uint32
	expiresAtMs   int64
	key           string
	dedupWindowMs int64
}

// scanned is what scanBody reads of a body with an inline copy.
type scanned struct {
	group string
	cs    *fsmpb.CopyState
	end   bodyEnd
	head  []byte // nil unless asked for
}

// scanBody is scanInline that also reads the body's bodyEnd fields and
// copies the head only if wantHead.
func scanBody(v []byte, wantHead bool) (s scanned, ok bool) {
	cs := &fsmpb.CopyState{}
	end := -1 // where the copy fields start
	for off := 0; off < len(v); {
		num, typ, n := protowire.ConsumeTag(v[off:])
		if n < 0 {
			return scanned{}, false
		}
		switch {
		case num > fieldCopyReason, num < fieldCopyAttempt && end >= 0:
			return scanned{}, false
		case num >= fieldCopyAttempt && end < 0:
			end = off
		}
		off += n
		var m int
		switch num {
		case fieldTopic, fieldKey, fieldFairnessKey, fieldInlineGroup, fieldCopyReason:
			var b []byte
			if b, m = protowire.ConsumeBytes(v[off:]); m < 0 || typ != protowire.BytesType {
				return scanned{}, false
			}
			switch num {
			case fieldTopic:
				cs.Topic = string(b)
			case fieldKey:
				s.end.key = string(b)
			case fieldFairnessKey:
				cs.FairnessKey = string(b)
			case fieldInlineGroup:
				s.group = string(b)
			default:
				cs.Reason = string(b)
			}
		case fieldPartition, fieldExpiresAtMs, fieldPriority, fieldGroupsPending, fieldDedupWindowMs,
			fieldFair, fieldVersion, fieldCopyAttempt, fieldCopyVisibleAtMs, fieldCopyLeased:
			var x uint64
			if x, m = protowire.ConsumeVarint(v[off:]); m < 0 || typ != protowire.VarintType {
				return scanned{}, false
			}
			switch num {
			case fieldPartition:
				cs.Partition = uint32(x)
			case fieldExpiresAtMs:
				s.end.expiresAtMs = int64(x)
			case fieldPriority:
				cs.Priority = int32(x)
			case fieldGroupsPending:
				s.end.groupsPending = uint32(x)
			case fieldDedupWindowMs:
				s.end.dedupWindowMs = int64(x)
			case fieldFair:
				cs.Fair = x != 0
			case fieldVersion:
				cs.Version = x
			case fieldCopyAttempt:
				cs.Attempt = uint32(x)
			case fieldCopyVisibleAtMs:
				cs.VisibleAtMs = int64(x)
			default:
				cs.Leased = x != 0
			}
		default:
			if m = protowire.ConsumeFieldValue(num, typ, v[off:]); m < 0 {
				return scanned{}, false
			}
		}
		off += m
	}
	if s.group == "" {
		return scanned{}, false
	}
	if end < 0 {
		end = len(v)
	}
	s.cs = cs
	if wantHead {
		s.head = make([]byte, end, end+32)
		copy(s.head, v)
	}
	return s, true
}

// appendInline appends cs's inline fields to head as a deterministic
// encoding of the body would write them: in field order, zero values left
// out. head + the fields encode the body with cs inline (see
// TestInlineSpliceEqualsMarshal).
func appendInline(head []byte, cs *fsmpb.CopyState) []byte {
	b := head
	if cs.Attempt != 0 {
		b = protowire.AppendTag(b, fieldCopyAttempt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(cs.Attempt))
	}
	if cs.VisibleAtMs != 0 {
		b = protowire.AppendTag(b, fieldCopyVisibleAtMs, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(cs.VisibleAtMs))
	}
	if cs.Leased {
		b = protowire.AppendTag(b, fieldCopyLeased, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if cs.Reason != "" {
		b = protowire.AppendTag(b, fieldCopyReason, protowire.BytesType)
		b = protowire.AppendString(b, cs.Reason)
	}
	return b
}

// clearInline empties the inline copy fields of a message a command
// carries, so only the state machine sets them.
func clearInline(m *fsmpb.StoredMessage) {
	m.InlineGroup, m.CopyAttempt, m.CopyVisibleAtMs, m.CopyLeased, m.CopyReason = "", 0, 0, false, ""
}

// getRecord decodes the record at key in r into m; false if there is none.
func getRecord(r pebble.Reader, key []byte, m proto.Message) (bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	if err := proto.Unmarshal(v, m); err != nil {
		return false, fmt.Errorf("decode %T: %w", m, err)
	}
	return true, nil
}
