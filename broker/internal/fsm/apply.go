package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/keys"
	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// DefaultGroup is the group a topic has before any other is created.
const DefaultGroup = "default"

// applier applies the commands of one Raft entry to an indexed batch, so
// later commands of the same run read what earlier ones wrote.
type applier struct {
	b     *pebble.Batch
	shard uint64
	index uint64 // Raft index of the entry being applied
	pos   uint32 // next message position within the entry
	lows  map[keys.Queue]int64
}

func (a *applier) apply(c *raftv1.Command) (*raftv1.Outcome, error) {
	switch k := c.Kind.(type) {
	case *raftv1.Command_Publish:
		return a.publish(k.Publish)
	case *raftv1.Command_Lease:
		return a.lease(k.Lease)
	case *raftv1.Command_Ack:
		return a.forEachRef(k.Ack.Refs, a.complete)
	case *raftv1.Command_Nack:
		return a.forEachRef(k.Nack.Refs, func(ref *raftv1.MessageRef, cs *raftv1.CopyState) error {
			return a.moveTo(ref, cs, k.Nack.VisibleAtMs, false)
		})
	case *raftv1.Command_Extend:
		return a.forEachRef(k.Extend.Refs, func(ref *raftv1.MessageRef, cs *raftv1.CopyState) error {
			return a.moveTo(ref, cs, k.Extend.DeadlineMs, true)
		})
	case *raftv1.Command_Sweep:
		return &raftv1.Outcome{}, a.sweep(k.Sweep.BeforeMs)
	}
	return &raftv1.Outcome{}, nil
}

func (a *applier) publish(p *raftv1.Publish) (*raftv1.Outcome, error) {
	if p.RequestId != "" {
		var rec raftv1.DedupRecord
		found, err := a.get(keys.Dedup(a.shard, p.RequestId), &rec)
		if err != nil || found {
			return rec.Outcome, err
		}
	}
	out := &raftv1.Outcome{Published: make([]*raftv1.PublishOutcome, 0, len(p.Messages))}
	groups := map[string][]string{} // topic → groups, for this command
	for _, m := range p.Messages {
		gs, ok := groups[m.Topic]
		if !ok {
			var err error
			if gs, err = a.groups(m.Topic); err != nil {
				return nil, err
			}
			groups[m.Topic] = gs
		}
		id := receipt.NewMessageID(a.shard, a.index, a.pos)
		a.pos++
		m.GroupsPending = uint32(len(gs))
		if err := a.put(keys.Message(a.shard, id[:]), m); err != nil {
			return nil, err
		}
		for _, g := range gs {
			cs := &raftv1.CopyState{VisibleAtMs: m.DueAtMs, Priority: m.Priority, Partition: m.Partition, Topic: m.Topic}
			if err := a.putCopy(id[:], g, cs); err != nil {
				return nil, err
			}
		}
		out.Published = append(out.Published, &raftv1.PublishOutcome{MessageId: id[:], DueAtMs: m.DueAtMs})
	}
	if p.RequestId != "" {
		if err := a.put(keys.Dedup(a.shard, p.RequestId), &raftv1.DedupRecord{AppliedAtMs: p.NowMs, Outcome: out}); err != nil {
			return nil, err
		}
		if err := a.b.Set(keys.DedupAt(a.shard, p.NowMs, p.RequestId), nil, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// groups lists the groups of topic on this shard, registering the default
// group on first use.
func (a *applier) groups(topic string) ([]string, error) {
	prefix := keys.GroupPrefix(a.shard, topic)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	var gs []string
	for valid := it.First(); valid; valid = it.Next() {
		gs = append(gs, keys.GroupFromKey(a.shard, topic, it.Key()))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, err
	}
	if len(gs) == 0 {
		gs = []string{DefaultGroup}
		if err := a.b.Set(keys.Group(a.shard, topic, DefaultGroup), nil, nil); err != nil {
			return nil, err
		}
	}
	return gs, nil
}

func (a *applier) lease(l *raftv1.Lease) (*raftv1.Outcome, error) {
	out := &raftv1.Outcome{Codes: make([]raftv1.RefCode, 0, len(l.Items))}
	for _, item := range l.Items {
		ref := item.GetRef()
		cs, err := a.copyState(ref)
		if err != nil {
			return nil, err
		}
		switch {
		case cs == nil:
			out.Codes = append(out.Codes, raftv1.RefCode_REF_CODE_NOT_FOUND)
			continue
		case cs.Attempt != ref.Attempt || cs.VisibleAtMs != item.VisibleAtMs:
			out.Codes = append(out.Codes, raftv1.RefCode_REF_CODE_STALE)
			continue
		}
		if item.Remove {
			err = a.complete(ref, cs)
		} else {
			cs.Attempt++
			err = a.moveTo(ref, cs, item.DeadlineMs, true)
		}
		if err != nil {
			return nil, err
		}
		out.Codes = append(out.Codes, raftv1.RefCode_REF_CODE_OK)
	}
	return out, nil
}

// forEachRef validates each ref against its copy's current lease and runs
// fn on the valid ones.
func (a *applier) forEachRef(refs []*raftv1.MessageRef, fn func(*raftv1.MessageRef, *raftv1.CopyState) error) (*raftv1.Outcome, error) {
	out := &raftv1.Outcome{Codes: make([]raftv1.RefCode, 0, len(refs))}
	for _, ref := range refs {
		cs, err := a.copyState(ref)
		if err != nil {
			return nil, err
		}
		switch {
		case cs == nil:
			out.Codes = append(out.Codes, raftv1.RefCode_REF_CODE_NOT_FOUND)
		case cs.Attempt != ref.Attempt || !cs.Leased:
			out.Codes = append(out.Codes, raftv1.RefCode_REF_CODE_STALE)
		default:
			if err := fn(ref, cs); err != nil {
				return nil, err
			}
			out.Codes = append(out.Codes, raftv1.RefCode_REF_CODE_OK)
		}
	}
	return out, nil
}

// moveTo re-indexes a copy at visibleAtMs; leased says whether it stays
// leased until then (lease, extend) or becomes visible then (nack).
func (a *applier) moveTo(ref *raftv1.MessageRef, cs *raftv1.CopyState, visibleAtMs int64, leased bool) error {
	if err := a.b.Delete(a.dueKey(ref, cs), nil); err != nil {
		return err
	}
	cs.VisibleAtMs, cs.Leased = visibleAtMs, leased
	return a.putCopy(ref.MessageId, ref.Group, cs)
}

// complete removes a group's copy and, with the last copy, the body.
func (a *applier) complete(ref *raftv1.MessageRef, cs *raftv1.CopyState) error {
	if err := a.b.Delete(a.dueKey(ref, cs), nil); err != nil {
		return err
	}
	if err := a.b.Delete(keys.Copy(a.shard, ref.MessageId, ref.Group), nil); err != nil {
		return err
	}
	bodyKey := keys.Message(a.shard, ref.MessageId)
	var body raftv1.StoredMessage
	found, err := a.get(bodyKey, &body)
	if err != nil || !found {
		return err
	}
	if body.GroupsPending <= 1 {
		return a.b.Delete(bodyKey, nil)
	}
	body.GroupsPending--
	return a.put(bodyKey, &body)
}

func (a *applier) sweep(beforeMs int64) error {
	lower, upper := keys.DedupAtRange(a.shard, beforeMs)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	var doomed [][]byte
	for valid := it.First(); valid; valid = it.Next() {
		doomed = append(doomed, append([]byte(nil), it.Key()...))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	for _, k := range doomed {
		if err := a.b.Delete(keys.Dedup(a.shard, keys.DedupRequestID(k)), nil); err != nil {
			return err
		}
		if err := a.b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) dueKey(ref *raftv1.MessageRef, cs *raftv1.CopyState) []byte {
	q := keys.Queue{Topic: cs.Topic, Partition: cs.Partition, Group: ref.Group}
	return keys.Due(a.shard, q, cs.VisibleAtMs, cs.Priority, ref.MessageId)
}

// putCopy writes a copy state and its due-index entry.
func (a *applier) putCopy(id []byte, group string, cs *raftv1.CopyState) error {
	if err := a.put(keys.Copy(a.shard, id, group), cs); err != nil {
		return err
	}
	q := keys.Queue{Topic: cs.Topic, Partition: cs.Partition, Group: group}
	if low, ok := a.lows[q]; !ok || cs.VisibleAtMs < low {
		a.lows[q] = cs.VisibleAtMs
	}
	return a.b.Set(keys.Due(a.shard, q, cs.VisibleAtMs, cs.Priority, id), binary.BigEndian.AppendUint32(nil, cs.Attempt), nil)
}

func (a *applier) copyState(ref *raftv1.MessageRef) (*raftv1.CopyState, error) {
	if len(ref.GetMessageId()) != keys.IDBytes {
		return nil, nil
	}
	var cs raftv1.CopyState
	found, err := a.get(keys.Copy(a.shard, ref.MessageId, ref.Group), &cs)
	if err != nil || !found {
		return nil, err
	}
	return &cs, nil
}

func (a *applier) get(key []byte, m proto.Message) (bool, error) {
	v, closer, err := a.b.Get(key)
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

func (a *applier) put(key []byte, m proto.Message) error {
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err
	}
	return a.b.Set(key, v, nil)
}
