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
// the key's partition; by id, the shard inside the id. The request id
// goes along: the shard answers a retry with the first outcome.
func (p producer) Cancel(ctx context.Context, req *sundialv1.CancelRequest) (*sundialv1.CancelResponse, error) {
	if vs := validate.Cancel(req, p.s.cfg.Limits); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return changeOnShard(ctx, p.s, req.GetMessage(), req.GetRequestId(), func(ctx context.Context, c brokerv1.ShardClient, sreq *brokerv1.ShardChangeRequest) (*sundialv1.CancelResponse, error) {
		sreq.RequestId = req.GetRequestId()
		return c.Cancel(ctx, sreq)
	})
}

// Reschedule forwards like Cancel.
func (p producer) Reschedule(ctx context.Context, req *sundialv1.RescheduleRequest) (*sundialv1.RescheduleResponse, error) {
	if vs := validate.Reschedule(req, p.s.cfg.Limits, time.Now().UnixMilli()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return changeOnShard(ctx, p.s, req.GetMessage(), req.GetRequestId(), func(ctx context.Context, c brokerv1.ShardClient, sreq *brokerv1.ShardChangeRequest) (*sundialv1.RescheduleResponse, error) {
		sreq.DelayMs, sreq.DeliverAtUnixMs, sreq.RequestId = req.GetDelayMs(), req.GetDeliverAtUnixMs(), req.GetRequestId()
		return c.Reschedule(ctx, sreq)
	})
}

// changeOnShard runs call, the change with requestID, on the shard
// holding sel. When the broker answers that the key lives on another shard
// (its routing version is newer than the proxy's table), it routes once
// more with a table at that version.
func changeOnShard[T any](ctx context.Context, s *Server, sel *sundialv1.MessageSelector, requestID string, call func(context.Context, brokerv1.ShardClient, *brokerv1.ShardChangeRequest) (T, error)) (T, error) {
	var out T
	for round := 0; ; round++ {
		sreq, err := s.changeRequest(ctx, sel)
		if err != nil {
			return out, err
		}
		out, err = onShardBy(ctx, s.forwardDo(requestID), sreq.GetShardId(), func(ctx context.Context, c brokerv1.ShardClient) (T, error) {
			return call(ctx, c, sreq)
		})
		ws, misplaced := apierr.AsWrongShard(err)
		if !misplaced || ws.GetTopic() == "" || round == 1 {
			return out, err
		}
		s.topics.Forget(sel.GetTopic())
		if _, err := s.tableAtLeast(ctx, ws.GetRoutingVersion()); err != nil {
			return out, err
		}
	}
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
