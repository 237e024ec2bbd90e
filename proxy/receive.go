package proxy

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/fanout"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// receiveRound bounds each long-poll round of a Receive over several
// shards: a message that becomes ready on one shard reaches the client at
// most this long after the shard answered, since the proxy answers once
// every shard of the round has (it never cancels a shard's Receive, which
// could lose a delivery the shard already leased).
const receiveRound = time.Second

// Receive is the pull API. The client's max_messages is split exactly over
// the topic's shards (fanout.Split, the remainder rotating), so the shards
// together never lease more than asked. A topic on one shard gets one call
// with the whole wait. On several shards the first round does not wait;
// then rounds of at most receiveRound run until a round delivers something
// or wait_ms is spent.
func (c consumer) Receive(ctx context.Context, req *sundialv1.ReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	if vs := validate.Receive(req); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	return c.s.receive(ctx, req)
}

func (s *Server) receive(ctx context.Context, req *sundialv1.ReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	table, err := s.tableFor(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	byShard := table.TopicShards(req.GetTopic())
	ids := fanout.SortedShards(byShard)
	if len(ids) == 0 {
		return nil, status.Error(codes.Unavailable, "routing table has no event shards")
	}
	want := int64(max(req.GetMaxMessages(), 1))
	group := req.GetGroup()
	if group == "" {
		group = validate.DefaultGroup
	}
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	deadline := time.Now().Add(wait)
	offset := rand.IntN(len(ids))
	for round := 0; ; round++ {
		roundWait := time.Until(deadline)
		switch {
		case roundWait < 0 || (round == 0 && len(ids) > 1):
			roundWait = 0
		case len(ids) > 1:
			roundWait = min(roundWait, receiveRound)
		}
		got, err := s.receiveRound(ctx, req, group, byShard, fanout.Split(want, ids, offset+round), roundWait)
		if len(got) > 0 || err != nil || time.Until(deadline) <= 0 || ctx.Err() != nil {
			if len(got) > 0 {
				// Leased deliveries go to the client even when another shard failed.
				return &sundialv1.ReceiveResponse{Deliveries: got}, nil
			}
			if err != nil {
				return nil, err
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return &sundialv1.ReceiveResponse{}, nil
		}
	}
}

// receiveRound asks each shard with a share for that many deliveries,
// waiting up to wait, and merges the answers in shard order. err is the
// first shard error.
func (s *Server) receiveRound(ctx context.Context, req *sundialv1.ReceiveRequest, group string, byShard map[uint64][]uint32, shares []fanout.Share, wait time.Duration) ([]*sundialv1.Delivery, error) {
	answers := make([][]*sundialv1.Delivery, len(shares))
	errs := make([]error, len(shares))
	var wg sync.WaitGroup
	for i, sh := range shares {
		wg.Go(func() {
			sreq := &brokerv1.ShardReceiveRequest{ShardId: sh.Shard, Partitions: byShard[sh.Shard], Request: proto.CloneOf(req)}
			sreq.Request.Group = group
			sreq.Request.MaxMessages = int32(sh.N)
			sreq.Request.WaitMs = wait.Milliseconds()
			var resp *sundialv1.ReceiveResponse
			errs[i] = s.fwd.DoFor(ctx, sh.Shard, s.cfg.ForwardTimeout+wait, func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = brokerv1.NewShardClient(conn).Receive(ctx, sreq)
				return err
			})
			ds := resp.GetDeliveries()
			if int64(len(ds)) > sh.N {
				// A broker bug: it leased more than asked. Those extra
				// leases expire and are redelivered (at-least-once).
				s.log.Error("shard delivered more than asked", zap.Uint64("shard_id", sh.Shard), zap.Int64("asked", sh.N), zap.Int("got", len(ds)))
				ds = ds[:sh.N]
			}
			answers[i] = ds
		})
	}
	wg.Wait()
	var out []*sundialv1.Delivery
	var firstErr error
	for i := range shares {
		out = append(out, answers[i]...)
		if firstErr == nil && errs[i] != nil {
			firstErr = errs[i]
		}
	}
	return out, firstErr
}
