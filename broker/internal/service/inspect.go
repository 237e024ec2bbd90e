package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	raftv1 "github.com/sundialmq/sundial/proto/gen/sundial/raft/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proto/validate"
)

// Read limits: how many index entries one call examines at most.
const (
	maxListExamined  = 100_000
	maxStatsExamined = 100_000
	maxHistExamined  = 1_000_000
)

// reader reads one shard's applied state on its leader.
type reader struct {
	shard uint64
	lead  *host.Leading // the handles of the leadership the read started under
	db    *pebble.DB
	nowMs int64
}

// reader answers a reader of shard id once this node leads it and has
// passed its leader barrier: a new leader's local state may lack entries
// committed in the previous term (a cancel answered DONE, an ack) until
// then.
func (s *Shard) reader(ctx context.Context, id uint64) (*reader, error) {
	lead, err := s.leading(id)
	if err != nil {
		return nil, err
	}
	wait, cancel := context.WithTimeout(ctx, readBarrierTimeout)
	defer cancel()
	if err := lead.Dispatcher.CaughtUp(wait); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, dispatch.ErrStopped):
			// Leadership moved while we waited: route to the new leader.
			if _, lerr := s.leading(id); lerr != nil {
				return nil, lerr
			}
			return nil, status.Error(codes.Unavailable, "shard leadership changed during the read")
		}
		return nil, status.Error(codes.Unavailable, "shard leader has not applied its previous term yet")
	}
	return &reader{shard: id, lead: lead, db: s.host.DB(), nowMs: s.opts.Now().UnixMilli()}, nil
}

// readBarrierTimeout bounds the wait for a new leader's barrier.
const readBarrierTimeout = 10 * time.Second

func (r *reader) get(key []byte, m proto.Message) (bool, error) {
	v, closer, err := r.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	return true, proto.Unmarshal(v, m)
}

// each calls fn for the entries in [lower, upper) until it returns false.
func (r *reader) each(lower, upper []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return errors.Join(err, it.Close())
		}
		more, err := fn(it.Key(), v)
		if err != nil || !more {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// info renders a message with its copies; nil if it is gone.
func (r *reader) info(id []byte) (*sundialv1.MessageInfo, error) {
	var m raftv1.StoredMessage
	if found, err := r.get(keys.Message(r.shard, id), &m); err != nil || !found {
		return nil, err
	}
	mid, _ := receipt.MessageIDFromBytes(id)
	info := &sundialv1.MessageInfo{
		MessageId: mid.String(), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers,
		PublishedAtUnixMs: m.PublishedAtMs, DueAtUnixMs: m.DueAtMs, ExpiresAtUnixMs: m.ExpiresAtMs,
		FairnessKey: m.FairnessKey, Priority: m.Priority,
	}
	prefix := keys.CopyPrefix(r.shard, id)
	err := r.each(prefix, keys.PrefixEnd(prefix), func(k, v []byte) (bool, error) {
		var cs raftv1.CopyState
		if err := proto.Unmarshal(v, &cs); err != nil {
			return false, err
		}
		state := sundialv1.CopyState_COPY_STATE_SCHEDULED
		switch {
		case cs.Leased && cs.VisibleAtMs > r.nowMs:
			state = sundialv1.CopyState_COPY_STATE_IN_FLIGHT
		case cs.VisibleAtMs <= r.nowMs:
			state = sundialv1.CopyState_COPY_STATE_READY
		}
		info.Copies = append(info.Copies, &sundialv1.CopyInfo{Group: keys.GroupOfCopy(k), State: state, Attempt: int32(cs.Attempt), VisibleAtUnixMs: cs.VisibleAtMs})
		return true, nil
	})
	return info, err
}

func matches(info *sundialv1.MessageInfo, req *sundialv1.ListMessagesRequest) bool {
	if req.GetHeaderKey() != "" && info.Headers[req.GetHeaderKey()] != req.GetHeaderValue() {
		return false
	}
	return strings.HasPrefix(info.Key, req.GetKeyPrefix())
}

// ListMessages lists a topic's messages on this shard by key prefix, or by
// due time of one group's copies, after a cursor.
func (s *Shard) ListMessages(ctx context.Context, req *brokerv1.ShardListMessagesRequest) (*brokerv1.ShardListMessagesResponse, error) {
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, toStatus(err)
	}
	lr := req.GetRequest()
	if bad := validate.TopicName("request.topic", lr.GetTopic()); len(bad) > 0 {
		return nil, toStatus(apierr.InvalidArgument(bad...))
	}
	size := int(lr.GetPageSize())
	if size <= 0 || size > 1000 {
		size = 100
	}
	resp := &brokerv1.ShardListMessagesResponse{}
	add := func(info *sundialv1.MessageInfo, cursor []byte) bool {
		resp.Messages = append(resp.Messages, info)
		resp.Cursors = append(resp.Cursors, cursor)
		return len(resp.Messages) < size
	}
	examined := 0
	if lr.GetKeyPrefix() != "" {
		// Cursors are "k" + key: keys sort the same on every shard.
		prefix := keys.KeyPrefix(r.shard, lr.GetTopic(), lr.GetKeyPrefix())
		lower := prefix
		if after := req.GetAfter(); len(after) > 1 {
			lower = append(keys.Key(r.shard, lr.GetTopic(), string(after[1:])), 0)
		}
		err = r.each(lower, keys.PrefixEnd(prefix), func(k, v []byte) (bool, error) {
			if examined++; examined > maxListExamined {
				return false, nil
			}
			var rec raftv1.KeyRecord
			if err := proto.Unmarshal(v, &rec); err != nil || rec.End != raftv1.EndState_END_STATE_PENDING {
				return err == nil, err
			}
			info, err := r.info(rec.MessageId)
			if err != nil || info == nil || !matches(info, lr) || !inRange(info.DueAtUnixMs, lr) {
				return err == nil, err
			}
			return add(info, append([]byte("k"), keys.KeyOfRecord(r.shard, lr.GetTopic(), k)...)), nil
		})
		return resp, toStatus(err)
	}
	group := lr.GetGroup()
	if group == "" {
		group = meta.DefaultGroup
	}
	// Cursors are the due-index suffix (visible_at, priority, id): they
	// sort by due time on every shard and partition. Each partition yields
	// up to a page of matching messages; the merge keeps the first page.
	type entry struct {
		cursor []byte
		info   *sundialv1.MessageInfo
	}
	var all []entry
	for _, part := range partitionsOf(req.GetPartitions()) {
		q := keys.Queue{Topic: lr.GetTopic(), Partition: part, Group: group}
		prefix := keys.QueuePrefix(r.shard, q)
		lower := keys.DueFrom(r.shard, q, lr.GetFromUnixMs())
		if after := req.GetAfter(); len(after) > 0 {
			if k := append(slices.Clone(prefix), after...); bytes.Compare(k, lower) >= 0 {
				lower = append(k, 0)
			}
		}
		upper := keys.PrefixEnd(prefix)
		if lr.GetToUnixMs() > 0 {
			upper = keys.DueFrom(r.shard, q, lr.GetToUnixMs())
		}
		n := 0
		err := r.each(lower, upper, func(k, v []byte) (bool, error) {
			if examined++; examined > maxListExamined || n >= size {
				return false, nil
			}
			if _, leased, _ := keys.ParseDueValue(v); leased {
				return true, nil // in flight: not scheduled
			}
			e, err := keys.ParseDue(r.shard, q, k)
			if err != nil {
				return false, err
			}
			info, err := r.info(e.ID)
			if err != nil || info == nil || !matches(info, lr) {
				return err == nil, err
			}
			all = append(all, entry{cursor: slices.Clone(k[len(prefix):]), info: info})
			n++
			return true, nil
		})
		if err != nil {
			return nil, toStatus(err)
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return bytes.Compare(a.cursor, b.cursor) })
	for _, e := range all {
		if !add(e.info, e.cursor) {
			break
		}
	}
	return resp, nil
}

func inRange(dueMs int64, req *sundialv1.ListMessagesRequest) bool {
	return (req.GetFromUnixMs() == 0 || dueMs >= req.GetFromUnixMs()) && (req.GetToUnixMs() == 0 || dueMs < req.GetToUnixMs())
}

func partitionsOf(parts []uint32) []uint32 {
	if len(parts) == 0 {
		return []uint32{0}
	}
	return parts
}

// GetMessage answers one message by id, or by key.
func (s *Shard) GetMessage(ctx context.Context, req *brokerv1.ShardChangeRequest) (*sundialv1.MessageInfo, error) {
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, toStatus(err)
	}
	sel := req.GetMessage()
	var id []byte
	switch by := sel.GetBy().(type) {
	case *sundialv1.MessageSelector_Key:
		var rec raftv1.KeyRecord
		found, err := r.get(keys.Key(r.shard, sel.GetTopic(), by.Key), &rec)
		if err != nil {
			return nil, toStatus(err)
		}
		if found && rec.End == raftv1.EndState_END_STATE_PENDING {
			id = rec.MessageId
		}
	case *sundialv1.MessageSelector_MessageId:
		mid, err := receipt.ParseMessageID(by.MessageId)
		if err != nil {
			return nil, toStatus(apierr.InvalidArgument(apierr.FieldViolation{Field: "message.message_id", Description: "is not a message id"}))
		}
		id = mid[:]
	default:
		return nil, toStatus(apierr.InvalidArgument(apierr.FieldViolation{Field: "message", Description: "set key or message_id"}))
	}
	if id == nil {
		return nil, status.Error(codes.NotFound, "no pending message has this key")
	}
	info, err := r.info(id)
	if err != nil {
		return nil, toStatus(err)
	}
	if info == nil || (sel.GetTopic() != "" && info.Topic != sel.GetTopic()) {
		return nil, status.Error(codes.NotFound, "no pending message has this id in this topic")
	}
	return info, nil
}

// Stats answers each group's counts of a topic on this shard.
func (s *Shard) Stats(ctx context.Context, req *brokerv1.ShardTopicRequest) (*brokerv1.ShardStatsResponse, error) {
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &brokerv1.ShardStatsResponse{}
	prefix := keys.GroupPrefix(r.shard, req.GetTopic())
	var groups []string
	if err := r.each(prefix, keys.PrefixEnd(prefix), func(k, _ []byte) (bool, error) {
		groups = append(groups, keys.GroupFromKey(r.shard, req.GetTopic(), k))
		return true, nil
	}); err != nil {
		return nil, toStatus(err)
	}
	for _, g := range groups {
		var c raftv1.Counters
		if _, err := r.get(keys.Counter(r.shard, req.GetTopic(), g), &c); err != nil {
			return nil, toStatus(err)
		}
		st := &sundialv1.GroupStats{Group: g, InFlight: c.InFlight, DeadLettered: c.DeadLettered}
		oldest := int64(0)
		examined := 0
		for _, part := range partitionsOf(req.GetPartitions()) {
			q := keys.Queue{Topic: req.GetTopic(), Partition: part, Group: g}
			err := r.each(keys.QueuePrefix(r.shard, q), keys.DueUntil(r.shard, q, r.nowMs), func(k, v []byte) (bool, error) {
				if examined++; examined > maxStatsExamined {
					return false, nil
				}
				e, err := keys.ParseDue(r.shard, q, k)
				if err != nil {
					return false, err
				}
				if _, leased, _ := keys.ParseDueValue(v); leased {
					st.InFlight-- // its lease ran out: ready for redelivery
				}
				st.Ready++
				if oldest == 0 || e.VisibleAtMs < oldest {
					oldest = e.VisibleAtMs
				}
				return true, nil
			})
			if err != nil {
				return nil, toStatus(err)
			}
		}
		if oldest > 0 {
			st.OldestReadyAgeMs = r.nowMs - oldest
		}
		st.Scheduled = max(c.Pending-st.InFlight-st.Ready, 0)
		st.LatenessP50Ms, st.LatenessP99Ms = r.lead.Dispatcher.Lateness(req.GetTopic(), g)
		resp.Stats = append(resp.Stats, st)
	}
	// Counts read after leadership moved on may miss the new leader's
	// commits: answer NotLeader so the proxy asks the leader.
	if _, err := s.leading(req.GetShardId()); err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// DueHistogram counts a group's scheduled copies per minute or hour.
func (s *Shard) DueHistogram(ctx context.Context, req *brokerv1.ShardDueHistogramRequest) (*sundialv1.DueHistogramResponse, error) {
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, toStatus(err)
	}
	hr := req.GetRequest()
	bucket := time.Minute.Milliseconds()
	if hr.GetBucket() == sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR {
		bucket = time.Hour.Milliseconds()
	}
	from := hr.GetFromUnixMs()
	if from == 0 {
		from = r.nowMs
	}
	from -= from % bucket
	to := hr.GetToUnixMs()
	if to == 0 {
		to = from + 60*bucket
	}
	if to <= from || (to-from)/bucket > 10_000 {
		return nil, toStatus(apierr.InvalidArgument(apierr.FieldViolation{Field: "request.to_unix_ms", Description: "must be after from and at most 10000 buckets away"}))
	}
	group := hr.GetGroup()
	if group == "" {
		group = meta.DefaultGroup
	}
	counts := map[int64]int64{}
	examined := 0
	for _, part := range partitionsOf(req.GetPartitions()) {
		q := keys.Queue{Topic: hr.GetTopic(), Partition: part, Group: group}
		err := r.each(keys.DueFrom(r.shard, q, from), keys.DueFrom(r.shard, q, to), func(k, v []byte) (bool, error) {
			if examined++; examined > maxHistExamined {
				return false, nil
			}
			if _, leased, _ := keys.ParseDueValue(v); leased {
				return true, nil
			}
			at := int64(binary.BigEndian.Uint64(k[len(keys.QueuePrefix(r.shard, q)):]))
			counts[at-at%bucket]++
			return true, nil
		})
		if err != nil {
			return nil, toStatus(err)
		}
	}
	resp := &sundialv1.DueHistogramResponse{}
	for start := from; start < to; start += bucket {
		if n := counts[start]; n > 0 {
			resp.Counts = append(resp.Counts, &sundialv1.HistogramCount{StartUnixMs: start, Count: n})
		}
	}
	return resp, nil
}
