package service

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/query"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proto/ring"
	"github.com/sundialmq/sundial/proto/validate"
)

// batchLimit caps what one purge, redrive or group removal command
// touches; handlers repeat commands until done.
const batchLimit = 1000

// ensureGroup makes group exist on topic the first time a consumer uses
// it: unless this shard holds its registration and the meta group lists
// it, it runs Admin.createGroup, which registers it on every shard of the
// topic before it answers, so the group gets a copy of every message
// published after this call answers. The default group is every topic's
// and each shard registers it on its first use of the topic: this shard
// registers it now if it has not. A dead-letter topic has the default
// group only (validate.ConsumerGroup).
func (s *Shard) ensureGroup(ctx context.Context, lead *host.Leading, topic, group string) error {
	registered, err := query.New(s.host.DB(), lead.Shard, 0).HasGroup(topic, group)
	if err != nil || registered && group == meta.DefaultGroup {
		return err
	}
	if group == meta.DefaultGroup {
		_, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: topic, Group: group}}})
		return err
	}
	if t, ok := s.meta.Meta().Topics[topic]; ok && registered && slices.Contains(t.Groups, group) {
		return nil
	}
	return s.admin.createGroup(ctx, topic, group, true)
}

// copyTopic answers the meta topic of a receipt's copy, nil if unknown.
func (s *Shard) copyTopic(ref *fsmpb.MessageRef) *meta.Topic {
	id, err := receipt.MessageIDFromBytes(ref.MessageId)
	if err != nil {
		return nil
	}
	topic, found, err := query.New(s.host.DB(), id.Shard(), 0).CopyTopic(id[:], ref.Group)
	if err != nil || !found {
		return nil
	}
	return s.meta.Meta().Topics[topic]
}

// Receive is the pull form of Subscribe: a consumer with max credit that
// lives until the first deliveries arrive or the wait ends.
func (s *Shard) Receive(ctx context.Context, req *brokerv1.ShardReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	resp, err := s.receive(ctx, req)
	return resp, err
}

func (s *Shard) receive(ctx context.Context, req *brokerv1.ShardReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	r := req.GetRequest()
	if bad := validate.Receive(r); len(bad) > 0 {
		return nil, apierr.InvalidArgument(inRequest(bad)...)
	}
	lead, err := s.leading(req.GetShardId())
	if err != nil {
		return nil, err
	}
	group := r.GetGroup()
	if group == "" {
		group = meta.DefaultGroup
	}
	if err := s.ensureGroup(ctx, lead, r.GetTopic(), group); err != nil {
		return nil, err
	}
	want := int(max(r.GetMaxMessages(), 1))
	visibility := time.Duration(r.GetVisibilityTimeoutMs()) * time.Millisecond
	if visibility == 0 {
		visibility = s.topicVisibility(r.GetTopic())
	}
	parts := req.GetPartitions()
	if len(parts) == 0 {
		parts = []uint32{0}
	}
	c := dispatch.NewConsumer(r.GetTopic(), group, parts, visibility, r.GetAckMode() == sundialv1.AckMode_ACK_MODE_AT_MOST_ONCE, want)
	lead.Dispatcher.Attach(c)
	// Detach gives back anything pushed after we stop taking, on the
	// dispatcher's own context: ctx may be cancelled by then, and the give-back
	// must still commit.
	defer lead.Dispatcher.Detach(c) //nolint:contextcheck // the give-back must outlive this request's ctx
	wait := time.NewTimer(time.Duration(r.GetWaitMs()) * time.Millisecond)
	defer wait.Stop()
	resp := &sundialv1.ReceiveResponse{}
	for len(resp.Deliveries) < want {
		select {
		case <-c.Ready():
			resp.Deliveries = append(resp.Deliveries, c.Take()...)
			if len(resp.Deliveries) > 0 {
				// Take what the same round produced, then answer.
				select {
				case <-c.Ready():
					resp.Deliveries = append(resp.Deliveries, c.Take()...)
				case <-time.After(2 * time.Millisecond):
				}
				return resp, nil
			}
		case <-wait.C:
			resp.Deliveries = append(resp.Deliveries, c.Take()...)
			return resp, nil
		case <-c.Closed():
			return resp, status.Error(codes.Unavailable, "shard leadership moved during receive")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return resp, nil
}

// Cancel cancels one message by key or id.
func (s *Shard) Cancel(ctx context.Context, req *brokerv1.ShardChangeRequest) (*sundialv1.CancelResponse, error) {
	if bad := validate.RequestID("request_id", req.GetRequestId()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	res, err := s.change(ctx, req, true, 0)
	if err != nil {
		return nil, err
	}
	return &sundialv1.CancelResponse{Outcome: changeOutcome(res.Code), MessageId: messageID(res.MessageId)}, nil
}

// Reschedule moves one message to a new due time.
func (s *Shard) Reschedule(ctx context.Context, req *brokerv1.ShardChangeRequest) (*sundialv1.RescheduleResponse, error) {
	nowMs := s.opts.Now().UnixMilli()
	if bad := validate.Reschedule(&sundialv1.RescheduleRequest{Message: req.GetMessage(), DelayMs: req.GetDelayMs(), DeliverAtUnixMs: req.GetDeliverAtUnixMs(), RequestId: req.GetRequestId()}, s.opts.Limits, nowMs); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	due := nowMs + req.GetDelayMs()
	if req.GetDeliverAtUnixMs() != 0 {
		due = max(req.GetDeliverAtUnixMs(), nowMs)
	}
	res, err := s.change(ctx, req, false, due)
	if err != nil {
		return nil, err
	}
	return &sundialv1.RescheduleResponse{Outcome: changeOutcome(res.Code), MessageId: messageID(res.MessageId), DueAtUnixMs: res.DueAtMs}, nil
}

// change proposes a cancel or reschedule (cancel false, to due) of the
// message req names. A request id goes into the command with the digest
// of the request, so the shard answers a retry with the first outcome; an
// id applied before for another request is InvalidArgument.
func (s *Shard) change(ctx context.Context, req *brokerv1.ShardChangeRequest, cancel bool, due int64) (*fsmpb.ChangeResult, error) {
	sel := req.GetMessage()
	c := &fsmpb.Change{NowMs: s.opts.Now().UnixMilli(), Topic: sel.GetTopic(), Cancel: cancel, DueAtMs: due, RequestId: req.GetRequestId()}
	if c.RequestId != "" {
		c.Digest = changeDigest(req, cancel)
	}
	bad := validate.Selector("message", sel, s.opts.Limits)
	switch by := sel.GetBy().(type) {
	case *sundialv1.MessageSelector_Key:
		c.Key = by.Key
	case *sundialv1.MessageSelector_MessageId:
		// The id's form is the receipt package's business, and routing it
		// this tier's.
		id, err := receipt.ParseMessageID(by.MessageId)
		switch {
		case by.MessageId == "":
		case err != nil:
			bad = append(bad, apierr.FieldViolation{Field: "message.message_id", Description: "is not a message id"})
		case id.Shard() != req.GetShardId():
			bad = append(bad, apierr.FieldViolation{Field: "message.message_id", Description: "belongs to another shard"})
		}
		c.MessageId = id[:]
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	lead, err := s.leading(req.GetShardId())
	if err != nil {
		return nil, err
	}
	st := s.meta.Meta()
	if _, ok := st.Topics[sel.GetTopic()]; !ok && c.Key != "" {
		// A topic created a moment ago: its partition count decides
		// where the key lives.
		if st, err = s.readMeta(ctx, "unknown_topic"); err != nil {
			return nil, err
		}
	}
	if t, ok := st.Topics[sel.GetTopic()]; ok {
		c.DedupWindowMs = t.DedupWindowMs
		if c.Key != "" {
			part := ring.KeyPartition(c.Key, max(t.Partitions, 1))
			if owner(st, s.ring(st), validate.DeadLetterBase(sel.GetTopic()), part, true) != req.GetShardId() &&
				!s.recorded(req.GetShardId(), c.RequestId, c.Digest, c.NowMs) {
				s.metrics.misplaced.Inc()
				return nil, apierr.Misplaced(req.GetShardId(), st.Version, sel.GetTopic(), part)
			}
		}
	}
	// Fence the dispatcher: a copy it picks from now until this change
	// applies is pushed only after its lease commits, so a cancel answered
	// DONE is never delivered.
	end := lead.Dispatcher.BeginChange()
	out, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Change{Change: c}})
	end(err)
	if err != nil {
		return nil, err
	}
	if out.GetRequestIdReused() {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{
			Field:       "request_id",
			Description: fmt.Sprintf("%q was used for another request within the dedup window; a retry must resend the same change, a new change needs a new id", c.RequestId),
		})
	}
	return out.GetChange(), nil
}

func changeOutcome(c fsmpb.ChangeCode) sundialv1.ChangeOutcome {
	switch c {
	case fsmpb.ChangeCode_CHANGE_CODE_DONE:
		return sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE
	case fsmpb.ChangeCode_CHANGE_CODE_IN_FLIGHT:
		return sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT
	case fsmpb.ChangeCode_CHANGE_CODE_ALREADY_DELIVERED:
		return sundialv1.ChangeOutcome_CHANGE_OUTCOME_ALREADY_DELIVERED
	}
	return sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND
}

func messageID(b []byte) string {
	id, err := receipt.MessageIDFromBytes(b)
	if err != nil {
		return ""
	}
	return id.String()
}

// Group registers or removes a group of a topic on this shard. A removal
// without a group removes the whole topic from the shard, for DeleteTopic:
// its copies, key records, counters and group registrations.
func (s *Shard) Group(ctx context.Context, req *brokerv1.ShardGroupRequest) (*brokerv1.ShardGroupResponse, error) {
	bad := validate.TopicName("topic", req.GetTopic())
	if req.GetGroup() != "" || !req.GetDelete() {
		bad = append(bad, validate.GroupName("group", req.GetGroup())...)
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	lead, err := s.leading(req.GetShardId())
	if err != nil {
		return nil, err
	}
	if !req.GetDelete() {
		_, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: req.GetTopic(), Group: req.GetGroup()}}})
		return &brokerv1.ShardGroupResponse{}, err
	}
	if req.GetGroup() == "" {
		if err := s.metaCaughtUp(ctx); err != nil {
			return nil, err
		}
	}
	n, err := s.repeat(ctx, lead, 0, func(limit uint32) *fsmpb.Command {
		return &fsmpb.Command{Kind: &fsmpb.Command_Group{Group: &fsmpb.Group{Topic: req.GetTopic(), Group: req.GetGroup(), Delete: true, Limit: limit}}}
	})
	return &brokerv1.ShardGroupResponse{Removed: n}, err
}

// metaCaughtUp waits until the meta state publishes are checked against
// (the cached one) is at least as new as a linearizable read: before a
// topic is forgotten here, this leader then refuses publishes to it (the
// delete-topic operation marked it deleting), so no publish checked
// against an older state is proposed after the forget. Only a publish
// already past its check races with it.
func (s *Shard) metaCaughtUp(ctx context.Context) error {
	st, err := s.meta.ReadMeta(ctx)
	if err != nil {
		return err
	}
	for s.meta.Meta().Version < st.Version {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Purge drops the pending copies of a topic (or one group) on this shard.
func (s *Shard) Purge(ctx context.Context, req *brokerv1.ShardTopicRequest) (*sundialv1.PurgeTopicResponse, error) {
	bad := validate.TopicName("topic", req.GetTopic())
	if req.GetGroup() != "" {
		bad = append(bad, validate.GroupName("group", req.GetGroup())...)
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	lead, err := s.leading(req.GetShardId())
	if err != nil {
		return nil, err
	}
	n, err := s.repeat(ctx, lead, 0, func(limit uint32) *fsmpb.Command {
		return &fsmpb.Command{Kind: &fsmpb.Command_Purge{Purge: &fsmpb.Purge{Topic: req.GetTopic(), Group: req.GetGroup(), Limit: limit, NowMs: s.opts.Now().UnixMilli()}}}
	})
	return &sundialv1.PurgeTopicResponse{Purged: n}, err
}

// Redrive moves dead letters of topic.dlq on this shard back to topic.
func (s *Shard) Redrive(ctx context.Context, req *brokerv1.ShardRedriveRequest) (*sundialv1.RedriveDeadLettersResponse, error) {
	bad := validate.TopicName("topic", req.GetTopic())
	if req.GetMaxMessages() < 0 {
		bad = append(bad, apierr.FieldViolation{Field: "max_messages", Description: "must not be negative"})
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	lead, err := s.leading(req.GetShardId())
	if err != nil {
		return nil, err
	}
	n, err := s.repeat(ctx, lead, req.GetMaxMessages(), func(limit uint32) *fsmpb.Command {
		return &fsmpb.Command{Kind: &fsmpb.Command_Redrive{Redrive: &fsmpb.Redrive{Topic: req.GetTopic(), Limit: limit, NowMs: s.opts.Now().UnixMilli()}}}
	})
	return &sundialv1.RedriveDeadLettersResponse{Moved: n}, err
}

// repeat proposes batches built by cmd until one touches fewer than its
// limit without answering more, or total (0: unbounded) is reached, and
// answers the sum.
func (s *Shard) repeat(ctx context.Context, lead *host.Leading, total int64, cmd func(limit uint32) *fsmpb.Command) (int64, error) {
	var n int64
	for {
		limit := uint32(batchLimit)
		if total > 0 {
			limit = uint32(min(int64(batchLimit), total-n))
		}
		out, err := lead.Proposer.Propose(ctx, cmd(limit))
		if err != nil {
			return n, err
		}
		n += int64(out.GetCount())
		if (out.GetCount() < limit && !out.GetMore()) || (total > 0 && n >= total) {
			return n, nil
		}
	}
}
