package service

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Limits of topic settings.
const (
	maxPartitions        = 1024
	minVisibilityTimeout = time.Second
	maxVisibilityTimeout = 12 * time.Hour
)

// Admin serves sundialv1.Admin on a broker; changes go through the meta
// group, which Dragonboat forwards to its leader.
type Admin struct {
	sundialv1.UnimplementedAdminServer
	host *host.Host
	opts Options
}

// NewAdmin returns the Admin service.
func NewAdmin(h *host.Host, opts Options) *Admin {
	return &Admin{host: h, opts: opts}
}

// CreateTopic creates a topic, filling cluster defaults.
func (a *Admin) CreateTopic(ctx context.Context, req *sundialv1.CreateTopicRequest) (*sundialv1.Topic, error) {
	t, err := a.createTopic(ctx, req.GetTopic(), req.GetIfNotExists())
	return t, toStatus(err)
}

func (a *Admin) createTopic(ctx context.Context, in *sundialv1.Topic, ifNotExists bool) (*sundialv1.Topic, error) {
	if in == nil {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "topic", Description: "is required"})
	}
	bad := validate.TopicName("topic.name", in.GetName())
	if strings.HasSuffix(in.GetName(), ".dlq") {
		bad = append(bad, apierr.FieldViolation{Field: "topic.name", Description: "the suffix .dlq is reserved for dead-letter topics"})
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
	}
	if in.GetKind() == sundialv1.TopicKind_TOPIC_KIND_FAIR {
		t.Kind = "fair"
	}
	switch {
	case in.GetPartitions() < 0 || in.GetPartitions() > maxPartitions:
		bad = append(bad, apierr.FieldViolation{Field: "topic.partitions", Description: "must be between 1 and 1024"})
	case in.GetVisibilityTimeoutMs() != 0 && (in.GetVisibilityTimeoutMs() < minVisibilityTimeout.Milliseconds() || in.GetVisibilityTimeoutMs() > maxVisibilityTimeout.Milliseconds()):
		bad = append(bad, apierr.FieldViolation{Field: "topic.visibility_timeout_ms", Description: "must be between 1s and 12h"})
	case in.GetMaxAttempts() < 0:
		bad = append(bad, apierr.FieldViolation{Field: "topic.max_attempts", Description: "must be at least 1"})
	case in.GetRetentionMs() < 0 || in.GetDedupWindowMs() < 0:
		bad = append(bad, apierr.FieldViolation{Field: "topic.retention_ms", Description: "durations must not be negative"})
	case in.GetMaxMessageBytes() < 0 || in.GetMaxMessageBytes() > a.opts.Limits.MaxMessageBytes:
		bad = append(bad, apierr.FieldViolation{Field: "topic.max_message_bytes", Description: "must not exceed the cluster's maximum message size"})
	}
	for i, g := range in.GetGroups() {
		bad = append(bad, validate.GroupName(fieldIndex("topic.groups", i), g)...)
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	code, data, err := a.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpCreateTopic, Topic: t, IfNotExists: ifNotExists})
	if err != nil {
		return nil, err
	}
	var stored meta.Topic
	if err := json.Unmarshal(data, &stored); err != nil {
		return nil, status.Errorf(codes.Internal, "decode created topic: %v", err)
	}
	if code == meta.ResultExists {
		return nil, status.Errorf(codes.AlreadyExists, "topic %q already exists", t.Name)
	}
	return topicProto(&stored), nil
}

// GetTopic answers one topic.
func (a *Admin) GetTopic(ctx context.Context, req *sundialv1.GetTopicRequest) (*sundialv1.Topic, error) {
	if bad := validate.TopicName("name", req.GetName()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	st, err := a.host.ReadMeta(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	t, ok := st.Topics[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "topic %q does not exist", req.GetName())
	}
	return topicProto(t), nil
}

// ListTopics pages through topics in name order.
func (a *Admin) ListTopics(ctx context.Context, req *sundialv1.ListTopicsRequest) (*sundialv1.ListTopicsResponse, error) {
	if req.GetPageSize() < 0 || req.GetPageSize() > 1000 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "page_size", Description: "must be between 0 (default 100) and 1000"})
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = 100
	}
	st, err := a.host.ReadMeta(ctx)
	if err != nil {
		return nil, toStatus(err)
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

// GetClusterInfo answers nodes, shards, leaders and the routing version.
func (a *Admin) GetClusterInfo(ctx context.Context, _ *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	st, err := a.host.ReadMeta(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	rt := routingTable(st, a.host.ShardLeaders())
	return &sundialv1.ClusterInfo{RoutingVersion: rt.Version, Nodes: rt.Nodes, Shards: rt.Shards, MetaLeaderNodeId: a.host.MetaLeader()}, nil
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
	}
}

func or(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}
