package service

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Admin serves sundialv1.Admin on a broker; changes go through the meta
// group, which Dragonboat forwards to its leader.
type Admin struct {
	sundialv1.UnimplementedAdminServer
	meta     *host.MetaClient
	replicas *host.Replicas
	opts     Options
	// healer knows the nodes' liveness while this broker leads meta
	// (Liveness), which GetClusterInfo reports; nil: nothing known.
	healer *operator.Healer
}

// NewAdmin returns the Admin service; healer is the broker's healer (nil:
// no liveness known).
func NewAdmin(h *host.Host, healer *operator.Healer, opts Options) *Admin {
	return &Admin{meta: h.MetaClient(), replicas: h.Replicas(), healer: healer, opts: opts}
}

// CreateTopic creates a topic, filling cluster defaults.
func (a *Admin) CreateTopic(ctx context.Context, req *sundialv1.CreateTopicRequest) (*sundialv1.Topic, error) {
	t, err := a.createTopic(ctx, req.GetTopic(), req.GetIfNotExists())
	return t, err
}

func (a *Admin) createTopic(ctx context.Context, in *sundialv1.Topic, ifNotExists bool) (*sundialv1.Topic, error) {
	if bad := validate.CreateTopic(in, a.opts.Limits); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	t := &meta.Topic{
		Name:                in.GetName(),
		Kind:                "delayed",
		Partitions:          uint32(max(in.GetPartitions(), 1)),
		VisibilityTimeoutMs: or(in.GetVisibilityTimeoutMs(), a.opts.DefaultVisibilityTimeout.Milliseconds()),
		MaxAttempts:         int32(or(int64(in.GetMaxAttempts()), int64(a.opts.DefaultMaxAttempts))),
		RetentionMs:         or(in.GetRetentionMs(), a.opts.DefaultRetention.Milliseconds()),
		MaxMessageBytes:     or(in.GetMaxMessageBytes(), a.opts.Limits.MaxMessageBytes),
		DedupWindowMs:       or(in.GetDedupWindowMs(), a.opts.DefaultDedupWindow.Milliseconds()),
		Groups:              in.GetGroups(),
		ReleaseRatePerSec:   in.GetReleaseRatePerSec(),
		JitterMs:            in.GetJitterMs(),
		FairnessWeights:     in.GetFairnessWeights(),
		BackoffBaseMs:       in.GetBackoffBaseMs(),
		BackoffMaxMs:        in.GetBackoffMaxMs(),
	}
	if in.GetKind() == sundialv1.TopicKind_TOPIC_KIND_FAIR {
		t.Kind = "fair"
	}
	data, err := a.proposeMeta(ctx, &meta.Command{Op: meta.OpCreateTopic, Topic: t, IfNotExists: ifNotExists})
	if err != nil {
		return nil, err
	}
	var stored meta.Topic
	if err := json.Unmarshal(data, &stored); err != nil {
		return nil, status.Errorf(codes.Internal, "decode created topic: %v", err)
	}
	if err := a.waitTopicGroups(ctx, &stored); err != nil {
		return nil, err
	}
	return topicProto(&stored), nil
}

// waitTopicGroups waits until the groups t was created with are
// registered on every shard holding its partitions: the create-topic
// operation the meta group stored with the topic (meta.createTopicGroups)
// has ended. A topic with the default group only has none to wait for. A
// retry of the create (if_not_exists) waits the same way.
func (a *Admin) waitTopicGroups(ctx context.Context, t *meta.Topic) error {
	if !slices.ContainsFunc(t.Groups, func(g string) bool { return g != meta.DefaultGroup }) {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, adminWaitTimeout)
		defer cancel()
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return err
	}
	op := st.TopicGroupsOperation(t.Name)
	if op == nil || op.Status == meta.OperationDone {
		return nil
	}
	err = a.waitOperation(ctx, op.ID)
	if status.Code(err) == codes.DeadlineExceeded {
		return status.Errorf(codes.DeadlineExceeded, "topic %q is created and operation %d still registers its groups on its shards and will complete: "+
			"CreateTopic again with if_not_exists waits for it (%v)", t.Name, op.ID, ctx.Err())
	}
	return err
}

// GetTopic answers one topic.
func (a *Admin) GetTopic(ctx context.Context, req *sundialv1.GetTopicRequest) (*sundialv1.Topic, error) {
	if bad := validate.TopicName("name", req.GetName()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	t, ok := st.Topics[req.GetName()]
	if !ok {
		return nil, &meta.NotFoundError{Topic: req.GetName()}
	}
	return topicProto(t), nil
}

// ListTopics pages through topics in name order.
func (a *Admin) ListTopics(ctx context.Context, req *sundialv1.ListTopicsRequest) (*sundialv1.ListTopicsResponse, error) {
	if bad := validate.ListTopics(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = validate.DefaultPageSize
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.ListTopicsResponse{}
	for _, name := range st.TopicNames() {
		if !strings.HasPrefix(name, req.GetPrefix()) || name <= req.GetPageToken() {
			continue
		}
		if len(resp.Topics) == size {
			resp.NextPageToken = resp.Topics[size-1].Name
			break
		}
		resp.Topics = append(resp.Topics, topicProto(st.Topics[name]))
	}
	return resp, nil
}

// GetClusterInfo answers nodes, shards, leaders, the routing version, the
// open hand-overs and the operations in progress, and for each node what
// the meta leader's healer knows of it (last seen, unreachable, suspect).
// Only the meta leader knows that, so any other broker forwards the call
// to it (see toMetaLeader), for at most half the caller's deadline (or
// infoForwardTimeout); when that fails (no leader known, a leader that
// just changed, is paused or cut off) it answers from here without it.
func (a *Admin) GetClusterInfo(ctx context.Context, req *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	fctx, cancel := forwardContext(ctx)
	info, forwarded, err := toMetaLeader(fctx, a.meta, a.opts.Peers, sundialv1.NewAdminClient, sundialv1.AdminClient.GetClusterInfo, req)
	cancel()
	if forwarded && err == nil {
		return info, nil
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	rt := routingTable(st, a.replicas.ShardLeaders(), true)
	if a.healer != nil {
		withLiveness(rt.Nodes, a.healer.Liveness())
	}
	return &sundialv1.ClusterInfo{RoutingVersion: rt.Version, Nodes: rt.Nodes, Shards: rt.Shards, MetaLeaderNodeId: a.meta.MetaLeader(),
		Handovers: rt.Handovers, Operations: operationsProto(st.Unfinished())}, nil
}

// infoForwardTimeout bounds GetClusterInfo's forward to the meta leader
// when the caller set no deadline.
const infoForwardTimeout = 5 * time.Second

// forwardContext is ctx for a forward that must leave time to answer from
// here: half of what remains of ctx's deadline, or infoForwardTimeout.
func forwardContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithTimeout(ctx, time.Until(d)/2)
	}
	return context.WithTimeout(ctx, infoForwardTimeout)
}

// withLiveness fills the nodes' liveness fields from known (nil: nothing
// known, the fields stay unset).
func withLiveness(nodes []*sundialv1.Node, known map[meta.NodeID]operator.NodeLiveness) {
	for _, n := range nodes {
		l, ok := known[meta.NodeID(n.GetNodeId())]
		if !ok {
			continue
		}
		if !l.LastSeen.IsZero() {
			n.LastSeenUnixMs = l.LastSeen.UnixMilli()
		}
		n.Unreachable, n.Suspect = l.Unreachable, l.Suspect
	}
}

func topicProto(t *meta.Topic) *sundialv1.Topic {
	kind := sundialv1.TopicKind_TOPIC_KIND_DELAYED
	if t.Kind == "fair" {
		kind = sundialv1.TopicKind_TOPIC_KIND_FAIR
	}
	return &sundialv1.Topic{
		Name: t.Name, Kind: kind, Partitions: int32(t.Partitions),
		VisibilityTimeoutMs: t.VisibilityTimeoutMs, MaxAttempts: t.MaxAttempts,
		RetentionMs: t.RetentionMs, MaxMessageBytes: t.MaxMessageBytes,
		Groups: t.Groups, CreatedAtUnixMs: t.CreatedAtMs, DedupWindowMs: t.DedupWindowMs,
		ReleaseRatePerSec: t.ReleaseRatePerSec, JitterMs: t.JitterMs, FairnessWeights: t.FairnessWeights,
		BackoffBaseMs: t.BackoffBaseMs, BackoffMaxMs: t.BackoffMaxMs,
	}
}

// UpdateTopic changes the settings named in the update mask.
func (a *Admin) UpdateTopic(ctx context.Context, req *sundialv1.UpdateTopicRequest) (*sundialv1.Topic, error) {
	in := req.GetTopic()
	if bad := validate.TopicName("topic.name", in.GetName()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if len(req.GetUpdateMask()) == 0 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "update_mask", Description: "name at least one field to change"})
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	cur, ok := st.Topics[in.GetName()]
	if !ok {
		return nil, &meta.NotFoundError{Topic: in.GetName()}
	}
	t := cur.Clone()
	var bad []apierr.FieldViolation
	for _, f := range req.GetUpdateMask() {
		switch f {
		case "visibility_timeout_ms":
			t.VisibilityTimeoutMs = in.GetVisibilityTimeoutMs()
		case "max_attempts":
			t.MaxAttempts = in.GetMaxAttempts()
		case "retention_ms":
			t.RetentionMs = in.GetRetentionMs() // 0: keep until completed
		case "max_message_bytes":
			t.MaxMessageBytes = in.GetMaxMessageBytes()
		case "dedup_window_ms":
			t.DedupWindowMs = in.GetDedupWindowMs()
		case "release_rate_per_sec":
			t.ReleaseRatePerSec = in.GetReleaseRatePerSec()
		case "jitter_ms":
			t.JitterMs = in.GetJitterMs()
		case "fairness_weights":
			t.FairnessWeights = in.GetFairnessWeights()
		case "backoff_base_ms":
			t.BackoffBaseMs = in.GetBackoffBaseMs()
		case "backoff_max_ms":
			t.BackoffMaxMs = in.GetBackoffMaxMs()
		default:
			bad = append(bad, apierr.FieldViolation{Field: "update_mask", Description: "cannot change " + f + " (partitions, kind and groups are fixed here: add or remove a group with CreateGroup or DeleteGroup)"})
		}
	}
	bad = append(bad, validate.TopicSettings(topicProto(t), a.opts.Limits)...)
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	data, err := a.proposeMeta(ctx, &meta.Command{Op: meta.OpUpdateTopic, Topic: t})
	if err != nil {
		return nil, err
	}
	var stored meta.Topic
	if err := json.Unmarshal(data, &stored); err != nil {
		return nil, status.Errorf(codes.Internal, "decode updated topic: %v", err)
	}
	return topicProto(&stored), nil
}

// DeleteTopic runs a delete-topic operation (adminops.go): the topic and
// its dead-letter topic are removed from every shard holding their
// partitions (copies, key records, counters, group registrations), then
// from the meta group, so a topic created again under the name starts
// afresh. Until then the topic refuses publishes and a create of its name
// (FailedPrecondition "being deleted").
func (a *Admin) DeleteTopic(ctx context.Context, req *sundialv1.DeleteTopicRequest) (*sundialv1.DeleteTopicResponse, error) {
	if bad := validate.TopicName("name", req.GetName()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	op, err := a.adminOperation(ctx, meta.OpKindDeleteTopic, req.GetName(), "")
	if err != nil {
		return nil, err
	}
	if err := a.runAdmin(ctx, op, false); err != nil {
		return nil, err
	}
	return &sundialv1.DeleteTopicResponse{}, nil
}

// CreateGroup runs a create-group operation (adminops.go): the group is
// added to the topic in the meta group and registered on every shard
// holding the topic's partitions, so each gives it a copy of every message
// published from then on. With if_not_exists an existing group is
// registered again (registering is idempotent).
func (a *Admin) CreateGroup(ctx context.Context, req *sundialv1.CreateGroupRequest) (*sundialv1.Group, error) {
	if bad := validate.TopicGroup(req.GetTopic(), req.GetGroup()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if err := a.createGroup(ctx, req.GetTopic(), req.GetGroup(), req.GetIfNotExists()); err != nil {
		return nil, err
	}
	return &sundialv1.Group{Topic: req.GetTopic(), Name: req.GetGroup()}, nil
}

// createGroup is how a group comes to exist after its topic, for
// CreateGroup and a consumer's first use of it (Shard.ensureGroup): it
// runs a create-group operation, which adds the group to the topic in the
// meta group and registers it on every shard holding the topic's
// partitions, and answers once every shard holds it, or with the error of
// runAdmin (DeadlineExceeded: the operation still runs and will
// complete). A topic that does not exist is created first when the
// cluster creates topics automatically. Concurrent calls for one group
// wait on one operation (the meta group answers its id).
func (a *Admin) createGroup(ctx context.Context, topic, group string, ifNotExists bool) error {
	if _, ok := a.meta.Meta().Topics[topic]; !ok && a.opts.AutoCreateTopics {
		if _, err := a.createTopic(ctx, &sundialv1.Topic{Name: topic}, true); err != nil {
			return err
		}
	}
	op, err := a.adminOperation(ctx, meta.OpKindCreateGroup, topic, group)
	if err != nil {
		return err
	}
	return a.runAdmin(ctx, op, ifNotExists)
}

// ListGroups answers a topic's groups (the proxy adds their stats).
func (a *Admin) ListGroups(ctx context.Context, req *sundialv1.ListGroupsRequest) (*sundialv1.ListGroupsResponse, error) {
	if bad := validate.TopicName("topic", req.GetTopic()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	t, ok := st.Topics[req.GetTopic()]
	if !ok {
		return nil, &meta.NotFoundError{Topic: req.GetTopic()}
	}
	resp := &sundialv1.ListGroupsResponse{}
	for _, g := range t.Groups {
		resp.Groups = append(resp.Groups, &sundialv1.Group{Topic: t.Name, Name: g})
	}
	return resp, nil
}

// DeleteGroup runs a delete-group operation (adminops.go): the group's
// copies and registration leave every shard holding the topic's
// partitions, then the group leaves the topic. The default group stays.
func (a *Admin) DeleteGroup(ctx context.Context, req *sundialv1.DeleteGroupRequest) (*sundialv1.DeleteGroupResponse, error) {
	if bad := validate.TopicGroup(req.GetTopic(), req.GetGroup()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if req.GetGroup() == meta.DefaultGroup {
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "group", Description: "every topic keeps the default group: purge it instead"})
	}
	op, err := a.adminOperation(ctx, meta.OpKindDeleteGroup, req.GetTopic(), req.GetGroup())
	if err != nil {
		return nil, err
	}
	if err := a.runAdmin(ctx, op, false); err != nil {
		return nil, err
	}
	return &sundialv1.DeleteGroupResponse{}, nil
}

// proposeMeta commits c in the meta group and answers the data of its
// result, or the typed error (meta.ExistsError, meta.NotFoundError,
// meta.ErrRefused) its result code means; errors.go translates those.
func (a *Admin) proposeMeta(ctx context.Context, c *meta.Command) ([]byte, error) {
	code, data, err := a.meta.ProposeMeta(ctx, c)
	if err != nil {
		return nil, err
	}
	return data, meta.ResultError(c, code)
}

func or(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}
