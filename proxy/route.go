package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"
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

// newTopics counts the topics of msgs that neither table lists nor meta
// knew when resolve asked: their first publish creates them.
func (s *Server) newTopics(table *routing.Table, msgs []*sundialv1.Message) int {
	var seen map[string]bool
	for _, m := range msgs {
		t := validate.DeadLetterBase(m.GetTopic())
		if table.Lists(t) || seen[t] || s.topics.Learned(t) {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[t] = true
	}
	return len(seen)
}

// newGroup admits the first Receive or Subscribe on a group table's route of
// topic does not list (it creates the group) under the caller's quota.
func (s *Server) newGroup(ctx context.Context, table *routing.Table, topic, group string) error {
	if group == "" {
		group = validate.DefaultGroup
	}
	if has, known := table.HasGroup(topic, group); known && !has {
		return s.quota.CreateGroup(ctx, principalOf(ctx))
	}
	return nil
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
//
// A request with an id claims it on its home shard first (see
// claimedParts): a reuse of the id with other messages is refused on every
// message, and nothing of it is applied.
func (s *Server) route(ctx context.Context, rid, splitBy string, table *routing.Table, msgs []*sundialv1.Message) []*sundialv1.PublishResult {
	var digest []byte
	if rid != "" {
		digest = requestDigest(msgs)
	}
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
		var answers []batch.Answer
		var refused []*brokerv1.WrongShard
		if round == 0 && rid != "" {
			answers, refused = s.claimedParts(ctx, partRID, table, parts, digest)
		} else {
			answers, refused = s.forwardParts(ctx, partRID, table, parts, nil)
		}
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

// claimedParts forwards the parts of a request with id rid after claiming
// rid on its home shard (routing.Table.Home) with digest, the digest of
// the whole request. The home's own part goes first and claims with it;
// when the request has no part there, or the home refused that part before
// applying it (misplaced, or invalid there), a claim with no messages
// does. Only then do the other parts go, together. A request with a part
// on its home claims in that part's Raft entry; any other costs one round
// trip before its parts (and a Raft entry on the home when it has no part
// there).
//
// A claim refused as a reuse (the home recorded rid with another digest)
// answers every message InvalidArgument on request_id, and nothing of the
// request is applied. A home part or claim that failed otherwise
// (Unavailable, a timeout: it may have been applied) fails the request's
// other parts unsent with it; a retry is answered from the home's records.
func (s *Server) claimedParts(ctx context.Context, rid string, table *routing.Table, parts []batch.Part, digest []byte) ([]batch.Answer, []*brokerv1.WrongShard) {
	answers := make([]batch.Answer, len(parts))
	refused := make([]*brokerv1.WrongShard, len(parts))
	home := table.Home(rid)
	k := slices.IndexFunc(parts, func(p batch.Part) bool { return p.Shard == home })
	claimed := false
	if k >= 0 {
		a, r := s.forwardParts(ctx, rid, table, parts[k:k+1], digest)
		answers[k], refused[k] = a[0], r[0]
		switch {
		case a[0].Err == nil:
			claimed = true
		case reusedID(a[0].Err):
			return failAll(answers, refused, -1, reuseStatus(rid))
		case r[0] == nil && codes.Code(a[0].Err.GetCode()) != codes.InvalidArgument:
			return failAll(answers, refused, k, a[0].Err)
		}
	}
	if !claimed {
		sreq := &brokerv1.ShardPublishRequest{ShardId: home, RequestId: partID(rid, home), RoutingVersion: table.Version(), RequestDigest: digest}
		err := s.forwardDo(sreq.RequestId)(ctx, home, func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := brokerv1.NewShardClient(conn).Publish(ctx, sreq)
			return err
		})
		switch {
		case err == nil:
		case reusedID(statusProto(err)):
			return failAll(answers, refused, -1, reuseStatus(rid))
		default:
			return failAll(answers, refused, k, statusProto(err))
		}
	}
	rest := make([]batch.Part, 0, len(parts))
	at := make([]int, 0, len(parts))
	for i, pt := range parts {
		if i != k {
			rest, at = append(rest, pt), append(at, i)
		}
	}
	a, r := s.forwardParts(ctx, rid, table, rest, nil)
	for j, i := range at {
		answers[i], refused[i] = a[j], r[j]
	}
	return answers, refused
}

// failAll answers every part but k (-1: every part) with st: those not
// sent, and a home part whose claim was refused.
func failAll(answers []batch.Answer, refused []*brokerv1.WrongShard, k int, st *statuspb.Status) ([]batch.Answer, []*brokerv1.WrongShard) {
	for i := range answers {
		if i != k {
			answers[i], refused[i] = batch.Answer{Err: st}, nil
		}
	}
	return answers, refused
}

// reusedID tells whether a broker refused a part or claim because its
// request id was used for other messages: InvalidArgument naming
// request_id.
func reusedID(st *statuspb.Status) bool {
	if st == nil || codes.Code(st.GetCode()) != codes.InvalidArgument {
		return false
	}
	for _, d := range status.FromProto(st).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == "request_id" {
					return true
				}
			}
		}
	}
	return false
}

// reuseStatus is the result of each message of a request whose id was used
// for other messages within the dedup window.
func reuseStatus(rid string) *statuspb.Status {
	return statusProto(apierr.InvalidArgument(apierr.FieldViolation{
		Field:       "request_id",
		Description: fmt.Sprintf("%q was used for other messages within the dedup window; a retry must resend the same messages, a new batch needs a new id", rid),
	}))
}

// requestDigest is the digest of a request's messages, in order, as the
// proxy forwards them (a retry of the same request has the same).
func requestDigest(msgs []*sundialv1.Message) []byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	opts := proto.MarshalOptions{Deterministic: true}
	for _, m := range msgs {
		b, _ := opts.Marshal(m) // a message that validated marshals
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	return h.Sum(nil)
}

// partID is the dedup id of a request's part on shard.
func partID(rid string, shard uint64) string {
	return rid + "/" + strconv.FormatUint(shard, 10)
}

// forwardParts sends each part to its shard's leader, under the dedup id
// "<rid>/<shard>" (partID) unless rid is empty, with digest as the
// request digest when it is set (the home part: see claimedParts).
// refused[i] is the WrongShard detail when the broker refused part i as
// misplaced.
func (s *Server) forwardParts(ctx context.Context, rid string, table *routing.Table, parts []batch.Part, digest []byte) ([]batch.Answer, []*brokerv1.WrongShard) {
	answers := make([]batch.Answer, len(parts))
	refused := make([]*brokerv1.WrongShard, len(parts))
	var wg sync.WaitGroup
	for i, pt := range parts {
		wg.Go(func() {
			sreq := &brokerv1.ShardPublishRequest{
				ShardId:        pt.Shard,
				Messages:       pt.Messages,
				RoutingVersion: table.Version(),
				RequestDigest:  digest,
			}
			if rid != "" {
				sreq.RequestId = partID(rid, pt.Shard)
			}
			var resp *sundialv1.PublishResponse
			err := s.forwardDo(sreq.RequestId)(ctx, pt.Shard, func(ctx context.Context, conn *grpc.ClientConn) error {
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
