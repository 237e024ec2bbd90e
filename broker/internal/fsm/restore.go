package fsm

import (
	"bytes"
	"errors"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
)

// A restore writes a backup into an empty shard through the Raft log, so
// every replica applies the same writes and a replica that joins later gets
// them in a snapshot. Its coordinator proposes a begin, the backup's
// records in numbered chunks (a full backup's, then each incremental's in
// order) and an end. The marker (keys.Restoring) names the restore and its
// last chunk: a chunk proposed again after a lost answer is answered OK
// without being written twice, and a begin, chunk or end of a finished
// restore is answered OK too, so the coordinator can resume from any step.
// The marker stays after the end; backups leave it out. A begin of another
// restore takes over a marker under which no chunk was written (a restore
// another shard refused), and is refused otherwise.
//
// Nothing a restore writes is delivered early: the dispatcher reloads the
// shard at the end (Change.Reset) and sees the due index as it was backed
// up. Leases in the backup are given up at the end (releaseLeases): their
// copies are visible again at once, delivered again (at least once), and a
// receipt of the backed-up cluster no longer matches them.

// restoreStep applies a Restore command.
func (a *applier) restoreStep(r *fsmpb.Restore) (*fsmpb.Outcome, error) {
	st := &fsmpb.RestoreState{}
	found, err := a.get(keys.Restoring(a.shard), st)
	if err != nil {
		return nil, err
	}
	code := func(c fsmpb.RestoreCode) (*fsmpb.Outcome, error) { return &fsmpb.Outcome{Restore: c}, nil }
	switch {
	case found && st.RestoreId != r.RestoreId && r.Begin && !st.Done && st.Seq == 0:
		// A restore that wrote nothing (refused by another shard, say)
		// gives way to another.
		st = &fsmpb.RestoreState{RestoreId: r.RestoreId}
	case found && st.RestoreId != r.RestoreId:
		if st.Done {
			return code(fsmpb.RestoreCode_RESTORE_CODE_NOT_EMPTY)
		}
		return code(fsmpb.RestoreCode_RESTORE_CODE_OTHER_RESTORE)
	case found && st.Done:
		return code(fsmpb.RestoreCode_RESTORE_CODE_OK)
	case !found && !r.Begin:
		return code(fsmpb.RestoreCode_RESTORE_CODE_OTHER_RESTORE)
	case !found:
		empty, err := a.empty()
		if err != nil || !empty {
			return &fsmpb.Outcome{Restore: fsmpb.RestoreCode_RESTORE_CODE_NOT_EMPTY}, err
		}
		st = &fsmpb.RestoreState{RestoreId: r.RestoreId}
	}
	if r.Seq != 0 {
		switch {
		case r.Seq <= st.Seq:
			return code(fsmpb.RestoreCode_RESTORE_CODE_OK)
		case r.Seq != st.Seq+1:
			return code(fsmpb.RestoreCode_RESTORE_CODE_OUT_OF_ORDER)
		}
		if bad, err := a.writeRecords(r.Records); err != nil || bad {
			return &fsmpb.Outcome{Restore: fsmpb.RestoreCode_RESTORE_CODE_BAD_RECORD}, err
		}
		st.Seq = r.Seq
	}
	if r.End {
		if err := a.releaseLeases(r.NowMs); err != nil {
			return nil, err
		}
		st.Done = true
		a.restored = true
	}
	return &fsmpb.Outcome{}, a.put(keys.Restoring(a.shard), st)
}

// writeRecords writes a chunk's records. A chunk with a record that is not
// shard contents writes nothing and answers bad.
func (a *applier) writeRecords(recs []*fsmpb.RestoreRecord) (bad bool, err error) {
	for _, rec := range recs {
		if keys.Bookkeeping(rec.Key) || rec.Op == fsmpb.RestoreOp_RESTORE_OP_DELETE_RANGE || len(rec.Key) > maxChunkBytes {
			return true, nil
		}
	}
	base := keys.ShardPrefix(a.shard)
	var key []byte
	for _, rec := range recs {
		key = append(append(key[:0], base...), rec.Key...)
		if rec.Op == fsmpb.RestoreOp_RESTORE_OP_DELETE {
			err = a.del(key)
		} else {
			err = a.set(key, rec.Value)
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// empty says whether the shard holds nothing but bookkeeping.
func (a *applier) empty() (bool, error) {
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(a.shard), UpperBound: keys.ShardEnd(a.shard)})
	if err != nil {
		return false, err
	}
	empty := true
	for valid := it.First(); valid; valid = it.Next() {
		if !keys.Bookkeeping(it.Key()[keys.PrefixLen:]) {
			empty = false
			break
		}
	}
	return empty, errors.Join(it.Error(), it.Close())
}

// releaseLeases makes every leased copy of the shard visible at nowMs, as
// a nack would: the consumers that held the leases belong to the cluster
// the backup was taken of. It reads the whole due index once (a restore
// ends once); the leased entries are collected first, then moved.
func (a *applier) releaseLeases(nowMs int64) error {
	type leased struct {
		id    []byte
		group string
	}
	var found []leased
	prefix := keys.DuePrefix(a.shard)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keys.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		_, isLease, err := keys.ParseDueValue(it.Value())
		if err != nil || !isLease {
			continue
		}
		topic, err := keys.TopicOfDue(a.shard, it.Key())
		if err != nil {
			continue
		}
		q, e, err := keys.ParseTopicDue(a.shard, topic, it.Key())
		if err != nil {
			continue
		}
		found = append(found, leased{id: bytes.Clone(e.ID), group: q.Group})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	for _, l := range found {
		c, err := a.copyOf(nil, l.id, l.group, readForRewrite)
		if err != nil {
			return err
		}
		if c == nil || !c.cs.Leased {
			continue
		}
		if err := a.moveTo(c, nowMs, false); err != nil {
			return err
		}
	}
	return nil
}
