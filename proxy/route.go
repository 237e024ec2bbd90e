package proxy

import (
	"context"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proxy/internal/batch"
	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// maxReroutes bounds how often the messages of one publish are split
// again after a broker refused them as misplaced.
const maxReroutes = 3

// resolve is table with the partition counts of msgs' topics that it does
// not list yet, asked from meta.
func (s *Server) resolve(ctx context.Context, table *routing.Table, msgs []*sundialv1.Message) (*routing.Table, error) {
	topics := make([]string, 0, 1)
	for _, m := range msgs {
		if !table.Lists(m.GetTopic()) {
			topics = append(topics, m.GetTopic())
		}
	}
	if len(topics) == 0 {
		return table, nil
	}
	return s.topics.Resolve(ctx, table, topics...)
}

// lookupTopic asks meta, through any broker, for a topic's partitions.
func (s *Server) lookupTopic(ctx context.Context, topic string) (uint32, error) {
	s.metrics.topicLookups.Inc()
	var t *sundialv1.Topic
	err := s.fwd.AnyRead(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		t, err = sundialv1.NewAdminClient(conn).GetTopic(ctx, &sundialv1.GetTopicRequest{Name: topic})
		return err
	})
	switch {
	case status.Code(err) == codes.NotFound:
		return 0, routing.ErrTopicNotFound
	case err != nil:
		return 0, err
	}
	return uint32(max(t.GetPartitions(), 1)), nil
}

// route splits msgs by shard under table, forwards the parts concurrently
// and merges the answers in request order. A part a broker refused as
// misplaced (its table is newer than ours, or the topic was unknown to
// ours) is split again once the routing table has caught up with the
// broker's routing version, at most maxReroutes times.
//
// The split is a pure function of splitBy (the request id, or a random one
// when the request has none), the message positions and the table, so a
// retry of the same request reaches the same shards with the same parts.
// rid empty: the parts carry no request id and nothing is deduplicated.
func (s *Server) route(ctx context.Context, rid, splitBy string, table *routing.Table, msgs []*sundialv1.Message) []*sundialv1.PublishResult {
	results := make([]*sundialv1.PublishResult, len(msgs))
	pending := make([]int, len(msgs)) // request positions still to route
	for i := range pending {
		pending[i] = i
	}
	for round := 0; ; round++ {
		sub := make([]*sundialv1.Message, len(pending))
		for j, i := range pending {
			sub[j] = msgs[i]
		}
		var loc batch.Locator = table
		if round == 0 && rid != "" && table.Settling() {
			// Split as before the ring changed: see routing.Table.Prior.
			loc = table.Prior()
		}
		parts := batch.Split(partRequestID(splitBy, round), sub, loc)
		partRID := ""
		if rid != "" {
			partRID = partRequestID(rid, round)
		}
		answers, refused := s.forwardParts(ctx, partRID, table, parts)
		merged := batch.Merge(len(sub), parts, answers)
		var again []int
		var need uint64
		for k, pt := range parts {
			ws := refused[k]
			if ws == nil {
				continue
			}
			if round == maxReroutes {
				// The table never caught up with the brokers: a retry
				// may succeed, so the answer is Unavailable.
				st := status.New(codes.Unavailable, "routing did not settle: "+status.Convert(statusErr(answers[k])).Message()).Proto()
				for _, j := range pt.Indices {
					merged[j] = &sundialv1.PublishResult{Error: st}
				}
				continue
			}
			need = max(need, ws.GetRoutingVersion())
			s.topics.Forget(ws.GetTopic())
			for _, j := range pt.Indices {
				again = append(again, pending[j])
				merged[j] = nil
			}
		}
		for j, r := range merged {
			if r != nil {
				results[pending[j]] = r
			}
		}
		if len(again) == 0 {
			return results
		}
		s.metrics.reroutes.Inc()
		next, err := s.tableAtLeast(ctx, need)
		if err == nil {
			again2 := make([]*sundialv1.Message, len(again))
			for j, i := range again {
				again2[j] = msgs[i]
			}
			next, err = s.resolve(ctx, next, again2)
		}
		if err != nil {
			st := statusProto(err)
			for _, i := range again {
				results[i] = &sundialv1.PublishResult{Error: st}
			}
			return results
		}
		table, pending = next, again
	}
}

// partRequestID is the request id prefix of a routing round: the first
// round keeps the client's id; a re-split part is another request to its
// shard, so it must not be answered from the first round's dedup record.
func partRequestID(rid string, round int) string {
	if round == 0 {
		return rid
	}
	return rid + "/reroute-" + strconv.Itoa(round)
}

// forwardParts sends each part to its shard's leader, under the dedup id
// "<rid>/<shard>" unless rid is empty. refused[i] is the WrongShard detail
// when the broker refused part i as misplaced.
func (s *Server) forwardParts(ctx context.Context, rid string, table *routing.Table, parts []batch.Part) ([]batch.Answer, []*brokerv1.WrongShard) {
	answers := make([]batch.Answer, len(parts))
	refused := make([]*brokerv1.WrongShard, len(parts))
	var wg sync.WaitGroup
	for i, pt := range parts {
		wg.Go(func() {
			sreq := &brokerv1.ShardPublishRequest{
				ShardId:        pt.Shard,
				Messages:       pt.Messages,
				RoutingVersion: table.Version(),
			}
			if rid != "" {
				sreq.RequestId = rid + "/" + strconv.FormatUint(pt.Shard, 10)
			}
			var resp *sundialv1.PublishResponse
			err := s.fwd.Do(ctx, pt.Shard, func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				resp, err = brokerv1.NewShardClient(conn).Publish(ctx, sreq)
				return err
			})
			if err != nil {
				if ws, ok := apierr.AsWrongShard(err); ok && ws.GetTopic() != "" {
					refused[i] = ws
				}
				answers[i] = batch.Answer{Err: statusProto(err)}
				return
			}
			answers[i] = batch.Answer{Results: resp.GetResults()}
		})
	}
	wg.Wait()
	return answers, refused
}

// tableAtLeast waits, at most the forward timeout, for a routing table of
// at least version; on timeout it answers the newest table, so a re-split
// still uses everything learned meanwhile.
func (s *Server) tableAtLeast(ctx context.Context, version uint64) (*routing.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	defer cancel()
	for {
		ch := s.watcher.Changed()
		t := s.watcher.Table()
		if t.Version() >= version {
			return t, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if t == nil {
				return nil, routing.ErrNoTable
			}
			return t, nil
		}
	}
}

// statusErr is the error of a failed part's answer.
func statusErr(a batch.Answer) error {
	return status.ErrorProto(a.Err)
}
