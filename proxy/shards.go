package proxy

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proxy/internal/fanout"
	"github.com/sundialmq/sundial/proxy/internal/forward"
	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// table waits (at most the forward timeout) for a routing table with at
// least one event shard.
func (s *Server) table(ctx context.Context) (*routing.Table, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	t, err := s.watcher.Wait(wctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, status.Error(codes.Unavailable, "no routing table yet")
		}
		return nil, err
	}
	if t.ShardCount() == 0 {
		return nil, status.Error(codes.Unavailable, "routing table has no event shards")
	}
	return t, nil
}

// tableFor is table with topic's partition count asked from meta when the
// routing table does not list the topic yet (so a topic created a moment
// ago is not taken for a one-partition topic).
func (s *Server) tableFor(ctx context.Context, topic string) (*routing.Table, error) {
	t, err := s.table(ctx)
	if err != nil || topic == "" || t.Lists(topic) {
		return t, err
	}
	return s.topics.Resolve(ctx, t, topic)
}

// onShard runs one Shard call against the leader of shard under the
// forwarding policy.
func onShard[T any](ctx context.Context, s *Server, shard uint64, call func(context.Context, brokerv1.ShardClient) (T, error)) (T, error) {
	return onShardBy(ctx, s.fwd.Do, shard, call)
}

// forwardDo is the forwarder's call for a write with requestID: Do, or
// DoUncut when the write has no id (a cut try retried would apply it
// twice).
func (s *Server) forwardDo(requestID string) func(context.Context, uint64, forward.Call) error {
	if requestID == "" {
		return s.fwd.DoUncut
	}
	return s.fwd.Do
}

func onShardBy[T any](ctx context.Context, do func(context.Context, uint64, forward.Call) error, shard uint64, call func(context.Context, brokerv1.ShardClient) (T, error)) (T, error) {
	var out T
	err := do(ctx, shard, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		out, err = call(ctx, brokerv1.NewShardClient(conn))
		return err
	})
	return out, err
}

// shardAnswer is one shard's answer in a fan-out.
type shardAnswer[T any] struct {
	shard uint64
	resp  T
	err   error
}

// onTopicShards runs call concurrently on every shard holding partitions
// of topic (each given its partitions, ascending) and returns the answers
// in ascending shard order. It fails when the table has none.
func onTopicShards[T any](ctx context.Context, s *Server, table *routing.Table, topic string, call func(ctx context.Context, c brokerv1.ShardClient, shard uint64, partitions []uint32) (T, error)) []shardAnswer[T] {
	byShard := table.TopicShards(topic)
	ids := fanout.SortedShards(byShard)
	out := make([]shardAnswer[T], len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			resp, err := onShard(ctx, s, id, func(ctx context.Context, c brokerv1.ShardClient) (T, error) {
				return call(ctx, c, id, byShard[id])
			})
			out[i] = shardAnswer[T]{shard: id, resp: resp, err: err}
		})
	}
	wg.Wait()
	return out
}

// allOf returns the answers' responses, or the first error in shard order.
func allOf[T any](answers []shardAnswer[T]) ([]T, error) {
	out := make([]T, 0, len(answers))
	for _, a := range answers {
		if a.err != nil {
			return nil, a.err
		}
		out = append(out, a.resp)
	}
	return out, nil
}

// locate is where the message a selector names lives; a malformed
// message id is InvalidArgument.
func locate(table *routing.Table, field string, sel *sundialv1.MessageSelector) (uint64, uint32, error) {
	shard, part, err := table.LocateMessage(sel)
	if err != nil {
		return 0, 0, apierr.InvalidArgument(apierr.FieldViolation{Field: field + ".message_id", Description: err.Error()})
	}
	return shard, part, nil
}
