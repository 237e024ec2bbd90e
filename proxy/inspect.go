package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/fanout"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// ListMessages asks every shard of the topic not yet listed to the end for
// a page after its cursor, merges the pages by cursor and answers the
// first page_size (fanout.MergePages). The page token records each shard's
// cursor; it is refused for another query, and after the topic's
// partitions moved to other shards ("page token is stale, list again").
func (a admin) ListMessages(ctx context.Context, req *sundialv1.ListMessagesRequest) (*sundialv1.ListMessagesResponse, error) {
	if vs := validate.ListMessages(req, a.s.cfg.Limits); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	table, err := a.s.tableFor(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = validate.DefaultPageSize
	}
	tok := fanout.Token{RoutingVersion: table.Version(), Placement: table.Fingerprint(req.GetTopic()), Query: fanout.QueryHash(req)}
	if pt := req.GetPageToken(); pt != "" {
		prev, err := fanout.DecodeToken(pt)
		switch {
		case err != nil:
			return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "page_token", Description: "malformed page token"})
		case prev.Query != tok.Query:
			return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "page_token", Description: "page token belongs to another query"})
		case prev.Placement != tok.Placement:
			return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "page_token", Description: "page token is stale, list again"})
		}
		tok = prev
	}
	shardReq := proto.CloneOf(req)
	shardReq.PageToken = ""
	shardReq.PageSize = int32(size)
	answers := onTopicShards(ctx, a.s, table, req.GetTopic(), func(ctx context.Context, c brokerv1.ShardClient, shard uint64, parts []uint32) (*brokerv1.ShardListMessagesResponse, error) {
		if tok.IsDone(shard) {
			return nil, nil
		}
		return c.ListMessages(ctx, &brokerv1.ShardListMessagesRequest{ShardId: shard, Partitions: parts, Request: shardReq, After: tok.After[shard]})
	})
	pages := make([]fanout.ShardPage, 0, len(answers))
	for _, ans := range answers {
		if ans.err != nil {
			return nil, ans.err
		}
		if tok.IsDone(ans.shard) {
			continue
		}
		pages = append(pages, fanout.ShardPage{Shard: ans.shard, Requested: size, Messages: ans.resp.GetMessages(), Cursors: ans.resp.GetCursors()})
	}
	msgs, next, more, err := fanout.MergePages(tok, pages, size)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &sundialv1.ListMessagesResponse{Messages: msgs}
	if more {
		next.RoutingVersion = table.Version()
		out.NextPageToken = next.Encode()
	}
	return out, nil
}

// GetMessage forwards to the shard holding the message, found like
// Cancel finds it.
func (a admin) GetMessage(ctx context.Context, req *sundialv1.GetMessageRequest) (*sundialv1.MessageInfo, error) {
	if vs := validate.Selector("message", req.GetMessage(), a.s.cfg.Limits); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	sreq, err := a.s.changeRequest(ctx, req.GetMessage())
	if err != nil {
		return nil, err
	}
	return onShard(ctx, a.s, sreq.GetShardId(), func(ctx context.Context, c brokerv1.ShardClient) (*sundialv1.MessageInfo, error) {
		return c.GetMessage(ctx, sreq)
	})
}

// DueHistogram fixes the range once (from 0 → now, to 0 → from plus
// DefaultHistogramBuckets buckets) so every shard counts the same
// buckets, fans out and sums the counts per bucket start.
func (a admin) DueHistogram(ctx context.Context, req *sundialv1.DueHistogramRequest) (*sundialv1.DueHistogramResponse, error) {
	now := time.Now().UnixMilli()
	if vs := validate.DueHistogram(req, now); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	table, err := a.s.tableFor(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	r := proto.CloneOf(req)
	if r.FromUnixMs == 0 {
		r.FromUnixMs = now
	}
	if r.ToUnixMs == 0 {
		r.ToUnixMs = r.FromUnixMs + validate.DefaultHistogramBuckets*validate.BucketMs(r.GetBucket())
	}
	resps, err := allOf(onTopicShards(ctx, a.s, table, req.GetTopic(), func(ctx context.Context, c brokerv1.ShardClient, shard uint64, parts []uint32) (*sundialv1.DueHistogramResponse, error) {
		return c.DueHistogram(ctx, &brokerv1.ShardDueHistogramRequest{ShardId: shard, Partitions: parts, Request: r})
	}))
	if err != nil {
		return nil, err
	}
	per := make([][]*sundialv1.HistogramCount, 0, len(resps))
	for _, resp := range resps {
		per = append(per, resp.GetCounts())
	}
	return &sundialv1.DueHistogramResponse{Counts: fanout.MergeHistogram(per...)}, nil
}

// RedriveDeadLetters moves "<topic>.dlq" back to "<topic>" on every shard
// holding the topic's partitions (the dead letters of partition p sit on
// the shard of p). max_messages 0 redrives everything. A cap is split over
// the shards (the first share at a random one), and the budget left by
// shards with fewer dead letters than their share goes to the others, round
// after round, until the cap is moved or every shard has run out: while the
// topic has that many dead letters, a call moves exactly max_messages.
func (a admin) RedriveDeadLetters(ctx context.Context, req *sundialv1.RedriveDeadLettersRequest) (*sundialv1.RedriveDeadLettersResponse, error) {
	vs := validate.TopicName("topic", req.GetTopic())
	if validate.IsDeadLetter(req.GetTopic()) {
		vs = append(vs, apierr.FieldViolation{Field: "topic", Description: "name the topic whose dead letters to redrive, " + validate.DeadLetterBase(req.GetTopic())})
	}
	if req.GetMaxMessages() < 0 {
		vs = append(vs, apierr.FieldViolation{Field: "max_messages", Description: "must not be negative"})
	}
	if len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	table, err := a.s.tableFor(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	topic := req.GetTopic()
	byShard := table.TopicShards(topic)
	if req.GetMaxMessages() == 0 {
		resps, err := allOf(onTopicShards(ctx, a.s, table, topic, func(ctx context.Context, c brokerv1.ShardClient, shard uint64, parts []uint32) (*sundialv1.RedriveDeadLettersResponse, error) {
			return c.Redrive(ctx, &brokerv1.ShardRedriveRequest{ShardId: shard, Topic: topic, Partitions: parts})
		}))
		if err != nil {
			return nil, err
		}
		var moved int64
		for _, r := range resps {
			moved += r.GetMoved()
		}
		return &sundialv1.RedriveDeadLettersResponse{Moved: moved}, nil
	}
	var moved int64
	// open lists the shards that may hold dead letters still: a shard that
	// moved fewer than its share has no more. Each round either spends the
	// whole budget left or closes a shard, so there are at most shards+1.
	open := fanout.SortedShards(byShard)
	offset := rand.IntN(len(open))
	for len(open) > 0 && moved < req.GetMaxMessages() {
		shares := fanout.Split(req.GetMaxMessages()-moved, open, offset)
		got := make([]int64, len(shares))
		errs := make([]error, len(shares))
		var wg sync.WaitGroup
		for i, sh := range shares {
			wg.Go(func() {
				resp, err := onShard(ctx, a.s, sh.Shard, func(ctx context.Context, c brokerv1.ShardClient) (*sundialv1.RedriveDeadLettersResponse, error) {
					return c.Redrive(ctx, &brokerv1.ShardRedriveRequest{ShardId: sh.Shard, Topic: topic, Partitions: byShard[sh.Shard], MaxMessages: sh.N})
				})
				got[i], errs[i] = resp.GetMoved(), err
			})
		}
		wg.Wait()
		emptied := map[uint64]bool{}
		for i, sh := range shares {
			moved += min(got[i], sh.N)
			if got[i] < sh.N {
				emptied[sh.Shard] = true
			}
		}
		open = slices.DeleteFunc(open, func(id uint64) bool { return emptied[id] })
		if err := errors.Join(errs...); err != nil {
			if moved > 0 {
				return nil, status.Errorf(status.Code(firstErr(errs)), "redrive moved %d messages, then failed: %v", moved, status.Convert(firstErr(errs)).Message())
			}
			return nil, firstErr(errs)
		}
	}
	return &sundialv1.RedriveDeadLettersResponse{Moved: moved}, nil
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
