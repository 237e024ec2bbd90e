package proxy

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/fanout"
	"github.com/sundialmq/sundial/proxy/internal/forward"
	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// UpdateTopic forwards to a broker (the meta group holds topic settings).
func (a admin) UpdateTopic(ctx context.Context, req *sundialv1.UpdateTopicRequest) (*sundialv1.Topic, error) {
	vs := validate.TopicName("topic.name", req.GetTopic().GetName())
	if len(req.GetUpdateMask()) == 0 {
		vs = append(vs, apierr.FieldViolation{Field: "update_mask", Description: "must name at least one field"})
	}
	if len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return anyBroker(ctx, a.s, req, adminCall(sundialv1.AdminClient.UpdateTopic))
}

// DeleteTopic asks a broker to run the delete-topic operation (the
// executor on the meta leader removes the topic and its dead-letter topic
// from every shard holding their partitions, then from meta) and waits for
// it: see adminOperation.
func (a admin) DeleteTopic(ctx context.Context, req *sundialv1.DeleteTopicRequest) (*sundialv1.DeleteTopicResponse, error) {
	if vs := validate.TopicName("name", req.GetName()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return adminOperation(ctx, a.s, req, adminCall(sundialv1.AdminClient.DeleteTopic))
}

// PurgeTopic drops the pending copies of a topic (or of one group) on
// every shard holding its partitions and sums what they dropped.
func (a admin) PurgeTopic(ctx context.Context, req *sundialv1.PurgeTopicRequest) (*sundialv1.PurgeTopicResponse, error) {
	vs := validate.TopicName("name", req.GetName())
	if g := req.GetGroup(); g != "" {
		vs = append(vs, validate.GroupName("group", g)...)
	}
	if len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	table, err := a.s.tableFor(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	n, err := a.s.purge(ctx, table, req.GetName(), req.GetGroup())
	if err != nil {
		return nil, err
	}
	return &sundialv1.PurgeTopicResponse{Purged: n}, nil
}

func (s *Server) purge(ctx context.Context, table *routing.Table, topic, group string) (int64, error) {
	resps, err := allOf(onTopicShards(ctx, s, table, topic, func(ctx context.Context, c brokerv1.ShardClient, shard uint64, parts []uint32) (*sundialv1.PurgeTopicResponse, error) {
		return c.Purge(ctx, &brokerv1.ShardTopicRequest{ShardId: shard, Topic: topic, Partitions: parts, Group: group})
	}))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, r := range resps {
		n += r.GetPurged()
	}
	return n, nil
}

// CreateGroup asks a broker to run the create-group operation (the group
// is added in meta and registered on every shard holding the topic's
// partitions by the executor on the meta leader) and waits for it: see
// adminOperation. With if_not_exists an existing group is registered
// again.
func (a admin) CreateGroup(ctx context.Context, req *sundialv1.CreateGroupRequest) (*sundialv1.Group, error) {
	if vs := validate.TopicGroup(req.GetTopic(), req.GetGroup()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return adminOperation(ctx, a.s, req, adminCall(sundialv1.AdminClient.CreateGroup))
}

// DeleteGroup asks a broker to run the delete-group operation (the
// group's copies leave every shard, then the group leaves meta) and waits
// for it: see adminOperation.
func (a admin) DeleteGroup(ctx context.Context, req *sundialv1.DeleteGroupRequest) (*sundialv1.DeleteGroupResponse, error) {
	if vs := validate.TopicGroup(req.GetTopic(), req.GetGroup()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return adminOperation(ctx, a.s, req, adminCall(sundialv1.AdminClient.DeleteGroup))
}

// adminWaitTimeout bounds an admin operation's wait for a request that
// carries no deadline.
const adminWaitTimeout = time.Minute

// adminAnswerMargin is how long before the caller's deadline an admin
// operation's wait, or a backup's, ends (at most a tenth of the time left).
const adminAnswerMargin = 200 * time.Millisecond

// answerEarly is ctx ending a little before its deadline (adminAnswerMargin,
// at most a tenth of the time left), so that what a call answers as the
// deadline nears reaches the caller; ctx unchanged when it has none.
func answerEarly(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d.Add(-min(adminAnswerMargin, time.Until(d)/10)))
}

// adminOperation forwards a request that runs a meta operation (the broker
// submits it and waits for it to end) until the request's deadline: a
// broker's answer cut short by the forward timeout (DeadlineExceeded) or a
// broker lost meanwhile (Unavailable) is sent again, to any broker, which
// finds the same operation running and waits on it, so no second one
// starts. When the request's own deadline passes the answer is
// DeadlineExceeded and the operation still completes (see awaitOperation
// for when the wait ends).
func adminOperation[Req, Resp any](ctx context.Context, s *Server, req Req, call func(*grpc.ClientConn, context.Context, Req) (Resp, error)) (Resp, error) {
	return awaitOperation(ctx, func(ctx context.Context) (Resp, error) {
		return anyBroker(ctx, s, req, call)
	})
}

// awaitOperation runs send (one forward of an operation's request) until it
// answers anything but DeadlineExceeded or Unavailable, or until the wait
// ends: adminAnswerMargin before ctx's deadline (at most a tenth of the
// time left), or adminWaitTimeout after it began when ctx has none. Every
// send runs under the wait's end, so the DeadlineExceeded saying the
// operation still runs reaches the caller before its own deadline.
func awaitOperation[Resp any](ctx context.Context, send func(context.Context) (Resp, error)) (Resp, error) {
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok {
		// Answer a little before the caller's deadline, so the caller reads
		// that the operation still runs rather than its own timeout.
		ctx, cancel = answerEarly(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, adminWaitTimeout)
	}
	defer cancel()
	for {
		resp, err := send(ctx)
		code := status.Code(err)
		if err == nil || (code != codes.DeadlineExceeded && code != codes.Unavailable) {
			return resp, err
		}
		if ctx.Err() != nil || !forward.Sleep(ctx, forward.MinBackoff) {
			if errors.Is(ctx.Err(), context.Canceled) {
				return resp, status.FromContextError(ctx.Err()).Err()
			}
			return resp, status.Errorf(codes.DeadlineExceeded, "the operation still runs and will complete: send the same request again to wait for it (last answer: %s)", status.Convert(err).Message())
		}
	}
}

// GetTopic answers the topic from the meta group with per-group stats
// merged over its shards (fanout.MergeStats: lateness is an upper bound).
func (a admin) GetTopic(ctx context.Context, req *sundialv1.GetTopicRequest) (*sundialv1.Topic, error) {
	if vs := validate.TopicName("name", req.GetName()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	t, err := readAnyBroker(ctx, a.s, req, adminCall(sundialv1.AdminClient.GetTopic))
	if err != nil {
		return nil, err
	}
	stats, err := a.s.stats(ctx, req.GetName(), t.GetGroups())
	switch {
	case status.Code(err) == codes.Unimplemented:
		// A broker without Shard.Stats (a rolling upgrade): the topic
		// without stats beats no topic.
	case err != nil:
		return nil, err
	default:
		t.Stats = stats
	}
	return t, nil
}

// ListGroups answers the groups from the meta group, each with its stats
// merged over the topic's shards.
func (a admin) ListGroups(ctx context.Context, req *sundialv1.ListGroupsRequest) (*sundialv1.ListGroupsResponse, error) {
	if vs := validate.TopicName("topic", req.GetTopic()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	resp, err := readAnyBroker(ctx, a.s, req, adminCall(sundialv1.AdminClient.ListGroups))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		names = append(names, g.GetName())
	}
	stats, err := a.s.stats(ctx, req.GetTopic(), names)
	if status.Code(err) == codes.Unimplemented {
		return resp, nil // as in GetTopic
	}
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*sundialv1.GroupStats, len(stats))
	for _, st := range stats {
		byName[st.GetGroup()] = st
	}
	for _, g := range resp.GetGroups() {
		g.Stats = byName[g.GetName()]
	}
	return resp, nil
}

// stats merges Shard.Stats over the topic's shards, one entry per group
// (groups first, in their order).
func (s *Server) stats(ctx context.Context, topic string, groups []string) ([]*sundialv1.GroupStats, error) {
	table, err := s.tableFor(ctx, topic)
	if err != nil {
		return nil, err
	}
	resps, err := allOf(onTopicShards(ctx, s, table, topic, func(ctx context.Context, c brokerv1.ShardClient, shard uint64, parts []uint32) (*brokerv1.ShardStatsResponse, error) {
		return c.Stats(ctx, &brokerv1.ShardTopicRequest{ShardId: shard, Topic: topic, Partitions: parts})
	}))
	if err != nil {
		return nil, err
	}
	per := make([][]*sundialv1.GroupStats, 0, len(resps))
	for _, r := range resps {
		per = append(per, r.GetStats())
	}
	return fanout.MergeStats(groups, per...), nil
}
