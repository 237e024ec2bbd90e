package proxy

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/ack"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

type consumer struct {
	sundialv1.UnimplementedConsumerServer
	s *Server
}

func (c consumer) Subscribe(stream grpc.BidiStreamingServer[sundialv1.SubscribeRequest, sundialv1.SubscribeResponse]) error {
	return c.s.subs.Serve(stream)
}

func (c consumer) Ack(ctx context.Context, req *sundialv1.AckRequest) (*sundialv1.AckResponse, error) {
	if err := c.checkSettle(req.GetReceipts(), req.GetRequestId()); err != nil {
		return nil, err
	}
	return &sundialv1.AckResponse{Results: settler{c.s}.Ack(ctx, req)}, nil
}

func (c consumer) Nack(ctx context.Context, req *sundialv1.NackRequest) (*sundialv1.NackResponse, error) {
	if err := c.checkSettle(req.GetReceipts(), req.GetRequestId()); err != nil {
		return nil, err
	}
	if req.GetDelayMs() < 0 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "delay_ms", Description: "must not be negative"})
	}
	return &sundialv1.NackResponse{Results: settler{c.s}.Nack(ctx, req)}, nil
}

func (c consumer) Extend(ctx context.Context, req *sundialv1.ExtendRequest) (*sundialv1.ExtendResponse, error) {
	if err := c.checkSettle(req.GetReceipts(), req.GetRequestId()); err != nil {
		return nil, err
	}
	if req.GetExtendMs() < 0 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "extend_ms", Description: "must not be negative"})
	}
	return &sundialv1.ExtendResponse{Results: settler{c.s}.Extend(ctx, req)}, nil
}

// checkSettle refuses a unary ack, nack or extend without receipts or
// beyond the limits (validate.Settle) before any receipt is forwarded.
func (c consumer) checkSettle(receipts []string, requestID string) error {
	if len(receipts) == 0 {
		return apierr.InvalidArgument(apierr.FieldViolation{Field: "receipts", Description: "must not be empty"})
	}
	if vs := validate.Settle("", receipts, requestID, c.s.cfg.Limits); len(vs) > 0 {
		return apierr.InvalidArgument(vs...)
	}
	return nil
}

// settler forwards acks, nacks and extends (unary or from a subscription
// stream) to the shards named by their receipts. They carry no request id,
// so they go uncut (forward.DoUncut): a try cut because the leader moved
// may have taken effect, and its retry would find the copy settled and
// answer NOT_FOUND or FailedPrecondition for an operation that succeeded.
type settler struct{ s *Server }

func (st settler) run(ctx context.Context, receipts []string, call func(ctx context.Context, c brokerv1.ShardClient, shard uint64, rs []string) ([]*sundialv1.ReceiptResult, error)) []*sundialv1.ReceiptResult {
	return ack.Run(ctx, receipts, func(ctx context.Context, shard uint64, rs []string) ([]*sundialv1.ReceiptResult, error) {
		var out []*sundialv1.ReceiptResult
		err := st.s.fwd.DoUncut(ctx, shard, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			out, err = call(ctx, brokerv1.NewShardClient(conn), shard, rs)
			return err
		})
		return out, err
	}, statusProto)
}

func (st settler) Ack(ctx context.Context, req *sundialv1.AckRequest) []*sundialv1.ReceiptResult {
	return ack.Run(ctx, req.GetReceipts(), st.s.acks.Ack, statusProto)
}

func (st settler) Nack(ctx context.Context, req *sundialv1.NackRequest) []*sundialv1.ReceiptResult {
	if req.GetDelayMs() < 0 {
		return invalidAll(req.GetReceipts(), "delay_ms must not be negative")
	}
	return st.run(ctx, req.GetReceipts(), func(ctx context.Context, c brokerv1.ShardClient, shard uint64, rs []string) ([]*sundialv1.ReceiptResult, error) {
		resp, err := c.Nack(ctx, &brokerv1.ShardNackRequest{ShardId: shard, Receipts: rs, DelayMs: req.GetDelayMs(), Reason: req.GetReason()})
		return resp.GetResults(), err
	})
}

func (st settler) Extend(ctx context.Context, req *sundialv1.ExtendRequest) []*sundialv1.ReceiptResult {
	if req.GetExtendMs() < 0 {
		return invalidAll(req.GetReceipts(), "extend_ms must not be negative")
	}
	return st.run(ctx, req.GetReceipts(), func(ctx context.Context, c brokerv1.ShardClient, shard uint64, rs []string) ([]*sundialv1.ReceiptResult, error) {
		resp, err := c.Extend(ctx, &brokerv1.ShardExtendRequest{ShardId: shard, Receipts: rs, ExtendMs: req.GetExtendMs()})
		return resp.GetResults(), err
	})
}

func invalidAll(receipts []string, msg string) []*sundialv1.ReceiptResult {
	st := &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg}
	out := make([]*sundialv1.ReceiptResult, len(receipts))
	for i, r := range receipts {
		out[i] = &sundialv1.ReceiptResult{Receipt: r, Error: st}
	}
	return out
}
