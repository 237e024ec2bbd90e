package proxy

import (
	"context"
	"time"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Cancel forwards to the shard holding the message: by key, the shard of
// the key's partition; by id, the shard inside the id.
func (p producer) Cancel(ctx context.Context, req *sundialv1.CancelRequest) (*sundialv1.CancelResponse, error) {
	if vs := validate.Cancel(req, p.s.cfg.Limits); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	sreq, err := p.s.changeRequest(ctx, req.GetMessage())
	if err != nil {
		return nil, err
	}
	return onShard(ctx, p.s, sreq.GetShardId(), func(ctx context.Context, c brokerv1.ShardClient) (*sundialv1.CancelResponse, error) {
		return c.Cancel(ctx, sreq)
	})
}

// Reschedule forwards like Cancel.
func (p producer) Reschedule(ctx context.Context, req *sundialv1.RescheduleRequest) (*sundialv1.RescheduleResponse, error) {
	if vs := validate.Reschedule(req, p.s.cfg.Limits, time.Now().UnixMilli()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	sreq, err := p.s.changeRequest(ctx, req.GetMessage())
	if err != nil {
		return nil, err
	}
	sreq.DelayMs, sreq.DeliverAtUnixMs = req.GetDelayMs(), req.GetDeliverAtUnixMs()
	return onShard(ctx, p.s, sreq.GetShardId(), func(ctx context.Context, c brokerv1.ShardClient) (*sundialv1.RescheduleResponse, error) {
		return c.Reschedule(ctx, sreq)
	})
}

// changeRequest routes a selector to its shard and partition.
func (s *Server) changeRequest(ctx context.Context, sel *sundialv1.MessageSelector) (*brokerv1.ShardChangeRequest, error) {
	table, err := s.tableFor(ctx, sel.GetTopic())
	if err != nil {
		return nil, err
	}
	shard, part, err := locate(table, "message", sel)
	if err != nil {
		return nil, err
	}
	return &brokerv1.ShardChangeRequest{ShardId: shard, Partition: part, Message: sel}, nil
}
