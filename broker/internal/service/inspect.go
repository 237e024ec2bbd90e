package service

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/query"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proto/validate"
)

// reader reads one shard's applied state on its leader.
type reader struct {
	*query.Reader
	lead  *host.Leading // the handles of the leadership the read started under
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
	nowMs := s.opts.Now().UnixMilli()
	return &reader{Reader: query.New(s.host.DB(), id, nowMs), lead: lead, nowMs: nowMs}, nil
}

// readBarrierTimeout bounds the wait for a new leader's barrier.
const readBarrierTimeout = 10 * time.Second

// messageInfo renders a message with its copies.
func messageInfo(m *query.Message) *sundialv1.MessageInfo {
	mid, _ := receipt.MessageIDFromBytes(m.ID)
	info := &sundialv1.MessageInfo{
		MessageId: mid.String(), Topic: m.Topic, Key: m.Key, Payload: m.Payload, Headers: m.Headers,
		PublishedAtUnixMs: m.PublishedAtMs, DueAtUnixMs: m.DueAtMs, ExpiresAtUnixMs: m.ExpiresAtMs,
		FairnessKey: m.FairnessKey, Priority: m.Priority,
	}
	for _, c := range m.Copies {
		info.Copies = append(info.Copies, &sundialv1.CopyInfo{Group: c.Group, State: copyState(c.State), Attempt: int32(c.Attempt), VisibleAtUnixMs: c.VisibleAtMs})
	}
	return info
}

func copyState(s query.CopyState) sundialv1.CopyState {
	switch s {
	case query.InFlight:
		return sundialv1.CopyState_COPY_STATE_IN_FLIGHT
	case query.Ready:
		return sundialv1.CopyState_COPY_STATE_READY
	}
	return sundialv1.CopyState_COPY_STATE_SCHEDULED
}

// ListMessages lists a topic's messages on this shard by key prefix, or by
// due time of one group's copies, after a cursor.
func (s *Shard) ListMessages(ctx context.Context, req *brokerv1.ShardListMessagesRequest) (*brokerv1.ShardListMessagesResponse, error) {
	lr := req.GetRequest()
	if bad := validate.ListMessages(lr, s.opts.Limits); len(bad) > 0 {
		return nil, apierr.InvalidArgument(inRequest(bad)...)
	}
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	size := int(lr.GetPageSize())
	if size == 0 {
		size = validate.DefaultPageSize
	}
	page, err := r.List(query.ListArgs{
		Topic: lr.GetTopic(), Group: groupOrDefault(lr.GetGroup()), Partitions: req.GetPartitions(),
		Filter: query.Filter{
			KeyPrefix: lr.GetKeyPrefix(), HeaderKey: lr.GetHeaderKey(), HeaderValue: lr.GetHeaderValue(),
			FromMs: lr.GetFromUnixMs(), ToMs: lr.GetToUnixMs(),
		},
		After: req.GetAfter(), PageSize: size,
	})
	if err != nil {
		return nil, err
	}
	resp := &brokerv1.ShardListMessagesResponse{}
	for _, l := range page {
		resp.Messages = append(resp.Messages, messageInfo(l.Message))
		resp.Cursors = append(resp.Cursors, l.Cursor)
	}
	return resp, nil
}

// inRequest names violations of the client request a shard request
// carries in its request field.
func inRequest(bad []apierr.FieldViolation) []apierr.FieldViolation {
	for i := range bad {
		bad[i].Field = "request." + bad[i].Field
	}
	return bad
}

func groupOrDefault(group string) string {
	if group == "" {
		return meta.DefaultGroup
	}
	return group
}

// GetMessage answers one message by id, or by key.
func (s *Shard) GetMessage(ctx context.Context, req *brokerv1.ShardChangeRequest) (*sundialv1.MessageInfo, error) {
	sel := req.GetMessage()
	var id []byte
	switch by := sel.GetBy().(type) {
	case *sundialv1.MessageSelector_Key:
	case *sundialv1.MessageSelector_MessageId:
		mid, err := receipt.ParseMessageID(by.MessageId)
		if err != nil {
			return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "message.message_id", Description: "is not a message id"})
		}
		id = mid[:]
	default:
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "message", Description: "set key or message_id"})
	}
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	var m *query.Message
	if id != nil {
		m, err = r.Message(id)
	} else {
		m, err = r.MessageByKey(sel.GetTopic(), sel.GetKey())
	}
	switch {
	case err != nil:
		return nil, err
	case m == nil && id == nil:
		return nil, status.Error(codes.NotFound, "no pending message has this key")
	case m == nil || (sel.GetTopic() != "" && m.Topic != sel.GetTopic()):
		return nil, status.Error(codes.NotFound, "no pending message has this id in this topic")
	}
	return messageInfo(m), nil
}

// Stats answers each group's counts of a topic on this shard.
func (s *Shard) Stats(ctx context.Context, req *brokerv1.ShardTopicRequest) (*brokerv1.ShardStatsResponse, error) {
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	stats, err := r.Stats(req.GetTopic(), req.GetPartitions())
	if err != nil {
		return nil, err
	}
	resp := &brokerv1.ShardStatsResponse{}
	for _, g := range stats {
		st := &sundialv1.GroupStats{
			Group: g.Group, Ready: g.Ready, InFlight: g.InFlight, Scheduled: g.Scheduled,
			DeadLettered: g.DeadLettered, OldestReadyAgeMs: g.OldestReadyAgeMs,
		}
		st.LatenessP50Ms, st.LatenessP99Ms = r.lead.Dispatcher.Lateness(req.GetTopic(), g.Group)
		resp.Stats = append(resp.Stats, st)
	}
	// Counts read after leadership moved on may miss the new leader's
	// commits: answer NotLeader so the proxy asks the leader.
	if _, err := s.leading(req.GetShardId()); err != nil {
		return nil, err
	}
	return resp, nil
}

// DueHistogram counts a group's scheduled copies per minute or hour.
func (s *Shard) DueHistogram(ctx context.Context, req *brokerv1.ShardDueHistogramRequest) (*sundialv1.DueHistogramResponse, error) {
	hr := req.GetRequest()
	nowMs := s.opts.Now().UnixMilli()
	if bad := validate.DueHistogram(hr, nowMs); len(bad) > 0 {
		return nil, apierr.InvalidArgument(inRequest(bad)...)
	}
	r, err := s.reader(ctx, req.GetShardId())
	if err != nil {
		return nil, err
	}
	bucket := validate.BucketMs(hr.GetBucket())
	from := hr.GetFromUnixMs()
	if from == 0 {
		from = r.nowMs
	}
	from -= from % bucket
	to := hr.GetToUnixMs()
	if to == 0 {
		to = from + validate.DefaultHistogramBuckets*bucket
	}
	counts, err := r.DueHistogram(query.HistogramArgs{
		Topic: hr.GetTopic(), Group: groupOrDefault(hr.GetGroup()), Partitions: req.GetPartitions(),
		FromMs: from, ToMs: to, BucketMs: bucket,
	})
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.DueHistogramResponse{}
	for _, c := range counts {
		resp.Counts = append(resp.Counts, &sundialv1.HistogramCount{StartUnixMs: c.StartMs, Count: c.Count})
	}
	return resp, nil
}
