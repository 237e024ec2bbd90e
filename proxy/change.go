package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Cancel forwards to the shard holding the message: by key, the shard of
// the key's partition; by id, the shard inside the id. The request id
// goes along: the shard answers a retry with the first outcome. A request
// id is claimed on its home shard first (claimChange), so one used for
// another request is refused wherever that request's message lives.
func (p producer) Cancel(ctx context.Context, req *sundialv1.CancelRequest) (*sundialv1.CancelResponse, error) {
	if vs := validate.Cancel(req, p.s.cfg.Limits); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	if err := p.s.claimChange(ctx, req.GetRequestId(), changeDigest("cancel", req.GetMessage(), 0, 0)); err != nil {
		return nil, err
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
	if err := p.s.claimChange(ctx, req.GetRequestId(), changeDigest("reschedule", req.GetMessage(), req.GetDelayMs(), req.GetDeliverAtUnixMs())); err != nil {
		return nil, err
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

// claimChange claims a change's request id rid on its home shard
// (routing.Table.Home) with digest, before the change goes to its
// message's shard: the message's shard keeps the change's own record,
// which a reuse for a message on another shard never meets. A reuse (the
// home recorded rid for another change or a publish) is InvalidArgument on
// request_id and changes nothing. Publishes claim under the same id
// (claimedParts), so a publish's id reused for a change is refused too.
func (s *Server) claimChange(ctx context.Context, rid string, digest []byte) error {
	if rid == "" {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	table, err := s.watcher.Wait(wctx)
	cancel()
	if err != nil {
		return err
	}
	home := table.Home(rid)
	sreq := &brokerv1.ShardPublishRequest{ShardId: home, RequestId: partID(rid, home), RoutingVersion: table.Version(), RequestDigest: digest}
	err = s.forwardDo(sreq.RequestId)(ctx, home, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := brokerv1.NewShardClient(conn).Publish(ctx, sreq)
		return err
	})
	if err != nil && reusedID(statusProto(err)) {
		return status.ErrorProto(reuseStatus(rid))
	}
	return err
}

// changeDigest is the digest of a change request: its kind, selector and
// due time (a retry of the same change has the same).
func changeDigest(kind string, sel *sundialv1.MessageSelector, delayMs, deliverAtMs int64) []byte {
	h := sha256.New()
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(sel) // a valid selector marshals
	var n [3 * binary.MaxVarintLen64]byte
	k := binary.PutUvarint(n[:], uint64(len(b)))
	k += binary.PutVarint(n[k:], delayMs)
	k += binary.PutVarint(n[k:], deliverAtMs)
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(n[:k])
	h.Write(b)
	return h.Sum(nil)
}
