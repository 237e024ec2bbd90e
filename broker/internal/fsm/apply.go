package fsm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// DefaultGroup is the group a topic has before any other is created.
const DefaultGroup = "default"

// DLQSuffix names a topic's dead-letter topic; it lives on the same shard.
const DLQSuffix = ".dlq"

// Headers set on dead letters.
const (
	HeaderOriginalTopic = "sundial-original-topic"
	HeaderOriginalGroup = "sundial-original-group"
	HeaderOriginalID    = "sundial-original-id"
	HeaderAttempts      = "sundial-attempts"
	HeaderReason        = "sundial-last-reason"
	HeaderOriginalFair  = "sundial-original-fair"
)

// applier applies the commands of one run of entries to an indexed batch,
// so later commands read what earlier ones wrote. It gathers the changes
// the dispatcher must hear of and the counters to write at the end.
type applier struct {
	b     *pebble.Batch
	shard uint64
	index uint64 // Raft index of the entry being applied
	pos   uint32 // next message position within the entry

	lows      map[keys.Queue]int64 // earliest visible_at inserted per queue
	expiryLow int64                // earliest TTL expiry inserted, 0 if none
	counters  map[counterKey]*fsmpb.Counters
	groupsOf  map[string][]string        // topic → groups on this shard, this run
	fencedOf  map[string]map[uint32]bool // base topic → fenced partitions, this run (fence.go)
	// endsAt gathers the ids of the end records the entry being applied
	// writes, by forget time: flushEnds indexes each time's ids in one
	// forget-index entry when the entry is done.
	endsAt map[int64][]byte
	// journal is the change journal's state while it is on, and touched
	// the keys this run wrote or deleted (journal.go).
	journal    *fsmpb.JournalState
	touched    map[string]struct{}
	journalCap uint64
	// restored: a restore ended in this run; the dispatcher reloads the
	// shard (restore.go).
	restored bool
	// visited counts the keys maintenance scans stepped on, so tests can
	// show a scan stays inside its range.
	visited int
	// decoded counts the bodies copyOf decoded whole, so tests can show
	// an ack of a one-copy message decodes none.
	decoded int
}

type counterKey struct{ topic, group string }

func (a *applier) apply(c *fsmpb.Command) (*fsmpb.Outcome, error) {
	switch k := c.Kind.(type) {
	case *fsmpb.Command_Publish:
		return a.publish(k.Publish)
	case *fsmpb.Command_Lease:
		return a.lease(k.Lease)
	case *fsmpb.Command_Ack:
		return a.forEachRef(k.Ack.Refs, readForDrop, func(_ int, c *groupCopy) error {
			return a.dropCopy(c, k.Ack.NowMs, fsmpb.EndState_END_STATE_DELIVERED)
		})
	case *fsmpb.Command_Nack:
		n := k.Nack
		return a.forEachRef(n.Refs, readForRewrite, func(i int, c *groupCopy) error {
			c.cs.Reason = n.Reason
			visibleAt := n.VisibleAtMs
			if len(n.VisibleAtEachMs) == len(n.Refs) {
				visibleAt = n.VisibleAtEachMs[i]
			}
			return a.moveTo(c, visibleAt, false)
		})
	case *fsmpb.Command_Extend:
		return a.forEachRef(k.Extend.Refs, readForRewrite, func(_ int, c *groupCopy) error {
			return a.moveTo(c, k.Extend.DeadlineMs, true)
		})
	case *fsmpb.Command_Sweep:
		return a.sweep(k.Sweep)
	case *fsmpb.Command_Change:
		return a.change(k.Change)
	case *fsmpb.Command_Group:
		return a.group(k.Group)
	case *fsmpb.Command_Purge:
		return a.purge(k.Purge)
	case *fsmpb.Command_Redrive:
		return a.redrive(k.Redrive)
	case *fsmpb.Command_Expire:
		return a.expire(k.Expire)
	case *fsmpb.Command_Fence:
		return a.fence(k.Fence)
	case *fsmpb.Command_Journal:
		return a.journalCmd(k.Journal)
	case *fsmpb.Command_Restore:
		return a.restoreStep(k.Restore)
	}
	return &fsmpb.Outcome{}, nil
}

// counter returns the counters of a group, loaded once per run.
func (a *applier) counter(topic, group string) (*fsmpb.Counters, error) {
	// The counters are written once per run (flushCounters) but changed
	// by entries: each entry that reads one for a change journals it.
	a.touch(keys.Counter(a.shard, topic, group))
	k := counterKey{topic, group}
	if c, ok := a.counters[k]; ok {
		return c, nil
	}
	c := &fsmpb.Counters{}
	if _, err := a.get(keys.Counter(a.shard, topic, group), c); err != nil {
		return nil, err
	}
	a.counters[k] = c
	return c, nil
}

// endsPerEntry caps the message ids of one ForgetEnds entry, so a sweep
// that forgets part of an entry rewrites a small value.
const endsPerEntry = 256

// flushEnds writes the forget-index entries of the end records the entry
// at a.index wrote, per forget time (their ids, 16 bytes each, as the
// value, at most endsPerEntry in one: an entry that ended more writes
// several, numbered after the index), in key order, instead of an entry
// per record.
func (a *applier) flushEnds() error {
	if len(a.endsAt) == 0 {
		return nil
	}
	ats := make([]int64, 0, len(a.endsAt))
	for at := range a.endsAt {
		ats = append(ats, at)
	}
	slices.Sort(ats)
	for _, at := range ats {
		ids := a.endsAt[at]
		for chunk := uint32(0); len(ids) > 0; chunk++ {
			n := min(len(ids), endsPerEntry*keys.IDBytes)
			rest := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, a.index), chunk)
			if err := a.set(keys.Forget(a.shard, at, keys.ForgetEnds, rest), ids[:n]); err != nil {
				return err
			}
			ids = ids[n:]
		}
		delete(a.endsAt, at)
	}
	return nil
}

// flushCounters writes every counter touched by the run, in key order.
func (a *applier) flushCounters() error {
	ks := make([]counterKey, 0, len(a.counters))
	for k := range a.counters {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(x, y counterKey) int {
		return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.group, y.group))
	})
	for _, k := range ks {
		c := a.counters[k]
		key := keys.Counter(a.shard, k.topic, k.group)
		var err error
		// Written without a journal touch: the entries that changed the
		// counter touched it (counter).
		if c.Pending == 0 && c.InFlight == 0 && c.DeadLettered == 0 {
			err = a.b.Delete(key, nil)
		} else {
			var v []byte
			if v, err = proto.Marshal(c); err == nil {
				err = a.b.Set(key, v, nil)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// scanKeys returns up to limit keys (limit 0: all) in [lower, upper) that
// keep accepts (nil keeps every key). It stops reading at the limit, so a
// bounded command never loads a whole topic's index.
func (a *applier) scanKeys(lower, upper []byte, limit int, keep func(k []byte) bool) ([][]byte, error) {
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for valid := it.First(); valid && (limit == 0 || len(out) < limit); valid = it.Next() {
		a.visited++
		if keep == nil || keep(it.Key()) {
			out = append(out, slices.Clone(it.Key()))
		}
	}
	return out, errors.Join(it.Error(), it.Close())
}

func (a *applier) get(key []byte, m proto.Message) (bool, error) {
	return getRecord(a.b, key, m)
}

func (a *applier) put(key []byte, m proto.Message) error {
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return err
	}
	return a.set(key, v)
}
