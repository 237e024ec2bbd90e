package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/broker/internal/query"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/frame"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proto/ring"
	"github.com/sundialmq/sundial/proto/validate"
)

// Options are the service's settings from broker.Config.
type Options struct {
	Limits                   validate.Limits
	AutoCreateTopics         bool
	DefaultVisibilityTimeout time.Duration
	DefaultMaxAttempts       int32
	DefaultRetention         time.Duration
	DefaultDedupWindow       time.Duration
	Now                      func() time.Time
	// StepTimeouts bound the steps of the operations Rebalance plans.
	StepTimeouts meta.StepTimeouts
	// Peers are the broker's connections to other brokers, over which
	// calls served on the meta leader are forwarded to it (forward.go).
	Peers *peer.Conns
	// RequireJoinToken makes JoinCluster refuse a join without a valid
	// join token (the broker serves TLS, or is insecure); without it a
	// join presenting no token is admitted (a plaintext loopback cluster).
	RequireJoinToken bool
	// Gate counts and logs the joins refused for their token; nil counts
	// nothing.
	Gate *Gate
}

// Shard serves brokerv1.Shard.
type Shard struct {
	brokerv1.UnimplementedShardServer
	host    *host.Host // its state DB
	meta    *host.MetaClient
	admin   *Admin
	opts    Options
	log     *zap.Logger
	metrics *Metrics
	// leaderInfo is host.Replicas.LeaderInfo; tests replace it to change leadership
	// between two steps of a handler.
	leaderInfo func(id uint64) (lead *host.Leading, leaderNode uint64, leaderAddr string, ok bool)
	rings      atomic.Pointer[stateRing] // the ring of the newest meta state seen
}

// NewShard returns the Shard service.
func NewShard(h *host.Host, admin *Admin, opts Options, log *zap.Logger, m *Metrics) *Shard {
	return &Shard{host: h, meta: h.MetaClient(), admin: admin, opts: opts, log: log, metrics: m, leaderInfo: h.Replicas().LeaderInfo}
}

// leading answers the shard's handles if this node leads it, else the
// NotLeader or WrongShard error the proxy routes on.
func (s *Shard) leading(id uint64) (*host.Leading, error) {
	lead, node, addr, hosted := s.leaderInfo(id)
	if !hosted {
		return nil, apierr.WrongShard(id, s.meta.Meta().Version)
	}
	if lead == nil {
		return nil, apierr.NotLeader(id, node, addr)
	}
	return lead, nil
}

// Publish stores a batch of messages on one shard.
func (s *Shard) Publish(ctx context.Context, req *brokerv1.ShardPublishRequest) (*sundialv1.PublishResponse, error) {
	start := time.Now()
	resp, err := s.publish(ctx, req)
	s.metrics.published(len(req.GetMessages()), time.Since(start), err)
	return resp, err
}

func (s *Shard) publish(ctx context.Context, req *brokerv1.ShardPublishRequest) (*sundialv1.PublishResponse, error) {
	lead, err := s.leading(req.GetShardId())
	if err != nil {
		return nil, err
	}
	if len(req.GetMessages()) == 0 {
		if req.GetRequestId() != "" && len(req.GetRequestDigest()) > 0 {
			return s.claim(ctx, lead, req)
		}
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "messages", Description: "must not be empty"})
	}
	now := s.opts.Now()
	nowMs := now.UnixMilli()
	var bad []apierr.FieldViolation
	for i, pm := range req.Messages {
		bad = append(bad, validate.Message(fieldIndex("messages", i), pm.GetMessage(), s.opts.Limits, nowMs)...)
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	st, err := s.topics(ctx, req.Messages, req.GetRoutingVersion())
	if err != nil {
		return nil, err
	}
	if err := notDeleting(st, req.Messages); err != nil {
		return nil, err
	}
	// A topic's own max_message_bytes, from the same meta the messages are
	// stamped from (a topic created a moment ago is in it).
	for i, pm := range req.Messages {
		if t, ok := st.Topics[pm.GetMessage().GetTopic()]; ok && t.MaxMessageBytes > 0 && t.MaxMessageBytes < s.opts.Limits.MaxMessageBytes {
			lim := s.opts.Limits
			lim.MaxMessageBytes = t.MaxMessageBytes
			bad = append(bad, validate.Message(fieldIndex("messages", i), pm.GetMessage(), lim, nowMs)...)
		}
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	cmd := &fsmpb.Publish{RequestId: req.GetRequestId(), NowMs: nowMs, Messages: make([]*fsmpb.StoredMessage, len(req.Messages))}
	if cmd.RequestId != "" {
		cmd.Digest = publishDigest(req.Messages)
		if d := req.GetRequestDigest(); len(d) > 0 {
			// The part sent to the request's home shard claims the
			// client's request id too (see claim).
			cmd.ClaimId, cmd.ClaimDigest = claimID(cmd.RequestId), d
		}
	}
	if err := s.placed(req.GetShardId(), st, req.Messages); err != nil && !s.recorded(req.GetShardId(), cmd.RequestId, cmd.Digest, nowMs) {
		return nil, err
	}
	for i, pm := range req.Messages {
		m := pm.GetMessage()
		due := validate.DueAt(m, nowMs)
		window := s.opts.DefaultDedupWindow.Milliseconds()
		retention := s.opts.DefaultRetention.Milliseconds()
		fair := false
		if t, ok := st.Topics[m.GetTopic()]; ok {
			window, fair, retention = t.DedupWindowMs, t.Kind == "fair", t.RetentionMs
			if t.JitterMs > 0 {
				due += rand.Int64N(t.JitterMs + 1)
			}
		}
		expires := expiresAt(due, m.GetTtlMs(), retention)
		cmd.Messages[i] = &fsmpb.StoredMessage{
			Topic: m.GetTopic(), Partition: pm.GetPartition(), Payload: m.GetPayload(), Headers: m.GetHeaders(),
			PublishedAtMs: nowMs, DueAtMs: due, ExpiresAtMs: expires,
			Key: m.GetKey(), FairnessKey: m.GetFairnessKey(), Priority: m.GetPriority(),
			OnConflict: keyConflict(m.GetOnKeyConflict()), MaxWaitMs: m.GetMaxWaitMs(), DedupWindowMs: window, Fair: fair,
		}
	}
	out, err := s.proposePublish(ctx, lead, cmd)
	if err != nil {
		return nil, err
	}
	if f := out.GetFenced(); f != nil {
		return nil, s.fenced(req.GetShardId(), f)
	}
	if out.GetRequestIdReused() {
		return nil, errRequestIDReused(req.GetRequestId())
	}
	resp := &sundialv1.PublishResponse{RequestId: req.GetRequestId(), Results: make([]*sundialv1.PublishResult, len(out.GetPublished()))}
	for i, p := range out.GetPublished() {
		id, _ := receipt.MessageIDFromBytes(p.MessageId)
		r := &sundialv1.PublishResult{MessageId: id.String(), DueAtUnixMs: p.DueAtMs, KeyOutcome: keyOutcome(p.KeyOutcome)}
		if p.KeyOutcome == fsmpb.KeyOutcome_KEY_OUTCOME_REJECTED {
			r.Error = statusProto(codes.AlreadyExists, "the key is pending (or was done within the dedup window) and on_key_conflict is REJECT")
			r.KeyOutcome = sundialv1.KeyOutcome_KEY_OUTCOME_UNSPECIFIED
		}
		resp.Results[i] = r
	}
	return resp, nil
}

// fenced is the answer to a publish the shard refused because a keyed
// message's partition is fenced for its hand-over's seal (see
// host.checkHandovers): misplaced, at a routing version past the meta
// state this broker has if that still shows the hand-over open, so the
// proxy routes the message again once its table has the seal.
func (s *Shard) fenced(shard uint64, f *fsmpb.FencedPartition) error {
	s.metrics.misplaced.Inc()
	st := s.meta.Meta()
	version := st.Version
	if _, open := st.KeyedOn(f.GetTopic(), f.GetPartition()); open {
		version++
	}
	return apierr.Misplaced(shard, version, f.GetTopic(), f.GetPartition())
}

// proposePublish commits a publish command. One that may rewrite a pending
// message (a keyed REPLACE or DEBOUNCE) fences the dispatcher like a cancel:
// a round that read the old contents meanwhile pushes only after its lease
// commits, and that lease fails on the content version, so the old payload
// is never pushed once the rewrite was answered.
func (s *Shard) proposePublish(ctx context.Context, lead *host.Leading, cmd *fsmpb.Publish) (*fsmpb.Outcome, error) {
	if !slices.ContainsFunc(cmd.Messages, rewrites) {
		return lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: cmd}})
	}
	end := lead.Dispatcher.BeginChange()
	out, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Publish{Publish: cmd}})
	end(err)
	return out, err
}

// rewrites tells whether publishing m may change a pending message's
// contents or due time.
func rewrites(m *fsmpb.StoredMessage) bool {
	return m.Key != "" && (m.OnConflict == fsmpb.KeyConflict_KEY_CONFLICT_REPLACE || m.OnConflict == fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE)
}

// expiresAt is when a message due at due is dropped undelivered (or
// unacked): ttl after its due time, capped by the topic's retention, also
// counted from the due time so that a long delay is never cut short. A
// zero ttl or retention sets no bound; 0 means the message never expires.
func expiresAt(due, ttlMs, retentionMs int64) int64 {
	life := ttlMs
	if retentionMs > 0 && (life <= 0 || retentionMs < life) {
		life = retentionMs
	}
	if life <= 0 {
		return 0
	}
	return due + life
}

func keyConflict(k sundialv1.KeyConflict) fsmpb.KeyConflict {
	switch k {
	case sundialv1.KeyConflict_KEY_CONFLICT_REPLACE:
		return fsmpb.KeyConflict_KEY_CONFLICT_REPLACE
	case sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE:
		return fsmpb.KeyConflict_KEY_CONFLICT_DEBOUNCE
	case sundialv1.KeyConflict_KEY_CONFLICT_REJECT:
		return fsmpb.KeyConflict_KEY_CONFLICT_REJECT
	}
	return fsmpb.KeyConflict_KEY_CONFLICT_IGNORE
}

func keyOutcome(k fsmpb.KeyOutcome) sundialv1.KeyOutcome {
	switch k {
	case fsmpb.KeyOutcome_KEY_OUTCOME_IGNORED:
		return sundialv1.KeyOutcome_KEY_OUTCOME_IGNORED
	case fsmpb.KeyOutcome_KEY_OUTCOME_REPLACED:
		return sundialv1.KeyOutcome_KEY_OUTCOME_REPLACED
	case fsmpb.KeyOutcome_KEY_OUTCOME_DEBOUNCED:
		return sundialv1.KeyOutcome_KEY_OUTCOME_DEBOUNCED
	}
	return sundialv1.KeyOutcome_KEY_OUTCOME_CREATED
}

// topics answers the meta state a publish is stamped from (FAIR flag,
// dedup window, jitter). The cached state serves when it knows every topic
// of msgs and is not older than the routing version the proxy routed with;
// otherwise a linearizable meta read does, so a publish right after
// CreateTopic is stamped with the topic as created. Unknown topics are
// created first when the cluster allows it, each once per request.
func (s *Shard) topics(ctx context.Context, msgs []*brokerv1.PartitionedMessage, routingVersion uint64) (*meta.State, error) {
	st := s.meta.Meta()
	if st.Version >= routingVersion && knowsAll(st, msgs) {
		return st, nil
	}
	reason := "unknown_topic"
	if st.Version < routingVersion {
		reason = "behind_proxy"
	}
	st, err := s.readMeta(ctx, reason)
	if err != nil {
		return nil, err
	}
	// Each unknown topic is created once per request, however many of
	// its messages name it (st is not re-read until all are created).
	created := map[string]bool{}
	for _, pm := range msgs {
		topic := pm.GetMessage().GetTopic()
		if _, ok := st.Topics[topic]; ok || created[topic] {
			continue
		}
		if !s.opts.AutoCreateTopics {
			return nil, status.Errorf(codes.NotFound, "topic %q does not exist and automatic topic creation is off: create it first", topic)
		}
		s.metrics.topicCreates.Inc()
		if _, err := s.admin.createTopic(ctx, &sundialv1.Topic{Name: topic}, true); err != nil {
			return nil, err
		}
		created[topic] = true
	}
	if len(created) > 0 {
		return s.readMeta(ctx, "created_topic")
	}
	return st, nil
}

// metaReadTimeout bounds the linearizable meta read of a publish or a
// keyed change.
const metaReadTimeout = 3 * time.Second

// readMeta is a linearizable meta read, counted by why it was needed.
func (s *Shard) readMeta(ctx context.Context, reason string) (*meta.State, error) {
	s.metrics.metaReads.WithLabelValues(reason).Inc()
	ctx, cancel := context.WithTimeout(ctx, metaReadTimeout)
	defer cancel()
	st, err := s.meta.ReadMeta(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.Errorf(codes.Unavailable, "linearizable meta read timed out: %v", err)
		}
		return nil, status.Errorf(codes.Unavailable, "linearizable meta read failed: %v", err)
	}
	return st, nil
}

// placed refuses a publish carrying a message that does not belong on
// shard under st: its partition is past the topic's partition count, is
// not its key's partition, or owner puts it elsewhere (the ring over st's
// serving shards, or for a keyed message the shard an open hand-over of
// its partition comes from). Stored anyway, such a message would be read
// by no subscription and found by no keyed publish, cancel or reschedule.
func (s *Shard) placed(shard uint64, st *meta.State, msgs []*brokerv1.PartitionedMessage) error {
	r := s.ring(st)
	for _, pm := range msgs {
		topic, part := pm.GetMessage().GetTopic(), pm.GetPartition()
		base := validate.DeadLetterBase(topic)
		if t, ok := st.Topics[base]; ok {
			n := max(t.Partitions, 1)
			key := pm.GetMessage().GetKey()
			if part >= n || (key != "" && part != ring.KeyPartition(key, n)) {
				s.metrics.misplaced.Inc()
				return apierr.Misplaced(shard, st.Version, topic, part)
			}
		}
		if owner(st, r, base, part, pm.GetMessage().GetKey() != "") != shard {
			s.metrics.misplaced.Inc()
			return apierr.Misplaced(shard, st.Version, topic, part)
		}
	}
	return nil
}

// recorded reports whether shard holds a dedup record of requestID with
// digest: a retry of a publish (or change) this shard applied, answered
// from the record even if the ring has moved its partitions elsewhere
// since (a proxy splits a request by the ring from before a hand-over
// while the hand-over is open, so a retry of a request sent before the
// change reaches the shards that stored it: G6).
func (s *Shard) recorded(shard uint64, requestID string, digest []byte, nowMs int64) bool {
	if requestID == "" {
		return false
	}
	got, found, err := query.New(s.host.DB(), shard, nowMs).DedupDigest(requestID)
	return err == nil && found && bytes.Equal(got, digest)
}

// owner is the shard a message of base's partition belongs on under st:
// the ring's owner, except that until the partition's hand-over is sealed
// (see meta.Handover) keyed messages stay on the shard it hands over from,
// so a key lives in one shard only.
func owner(st *meta.State, r *ring.Ring, base string, part uint32, keyed bool) uint64 {
	if keyed {
		if from, ok := st.KeyedOn(base, part); ok {
			return uint64(from)
		}
	}
	return r.Locate(base, part)
}

// ring is the hash ring over st's serving event shards, rebuilt only when
// that set changes (building one takes milliseconds).
func (s *Shard) ring(st *meta.State) *ring.Ring {
	cached := s.rings.Load()
	if cached != nil && cached.state == st {
		return cached.ring
	}
	ids := st.RingShards()
	var r *ring.Ring
	if cached != nil && slices.Equal(cached.ring.Shards(), ids) {
		r = cached.ring
	} else {
		r = ring.New(ids)
	}
	s.rings.Store(&stateRing{state: st, ring: r})
	return r
}

// stateRing is the ring of one meta state's shard set.
type stateRing struct {
	state *meta.State
	ring  *ring.Ring
}

// notDeleting refuses a publish to a topic (or its dead-letter topic) an
// unfinished delete-topic operation is removing: stored now, the message
// could outlive the deletion and surface in a topic created afresh.
func notDeleting(st *meta.State, msgs []*brokerv1.PartitionedMessage) error {
	for _, pm := range msgs {
		if t := st.Topics[validate.DeadLetterBase(pm.GetMessage().GetTopic())]; t != nil && t.Deleting != 0 {
			return &meta.BeingDeletedError{Topic: t.Name}
		}
	}
	return nil
}

// knowsAll reports whether st has the topic of every message.
func knowsAll(st *meta.State, msgs []*brokerv1.PartitionedMessage) bool {
	for _, pm := range msgs {
		if _, ok := st.Topics[pm.GetMessage().GetTopic()]; !ok {
			return false
		}
	}
	return true
}

// errRequestIDReused refuses a publish whose request id was used for other
// messages within the dedup window.
func errRequestIDReused(requestID string) error {
	return apierr.InvalidArgument(apierr.FieldViolation{
		Field:       "request_id",
		Description: fmt.Sprintf("%q was used for other messages within the dedup window; a retry must resend the same messages, a new batch needs a new id", requestID),
	})
}

// claimID is the dedup id under which the home shard of a client request
// records its digest: the home part's request id and a suffix no part id
// has.
func claimID(partRequestID string) string { return partRequestID + "\x00claim" }

// claim records, on the home shard of a client request id, the digest of
// the whole request before the proxy applies its parts elsewhere (a
// publish that is a claim only; a request with a part on the home shard
// claims with that part). The same request claims again on a retry and
// passes; a request with other messages under the same id is refused
// there, before any of it is applied on any shard.
func (s *Shard) claim(ctx context.Context, lead *host.Leading, req *brokerv1.ShardPublishRequest) (*sundialv1.PublishResponse, error) {
	if bad := validate.RequestID("request_id", req.GetRequestId()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	cmd := &fsmpb.Publish{NowMs: s.opts.Now().UnixMilli(), ClaimId: claimID(req.GetRequestId()), ClaimDigest: req.GetRequestDigest()}
	out, err := s.proposePublish(ctx, lead, cmd)
	if err != nil {
		return nil, err
	}
	if out.GetRequestIdReused() {
		return nil, errRequestIDReused(req.GetRequestId())
	}
	return &sundialv1.PublishResponse{RequestId: req.GetRequestId()}, nil
}

// Subscribe streams one shard's deliveries.
func (s *Shard) Subscribe(stream brokerv1.Shard_SubscribeServer) error {
	return s.subscribe(stream)
}

func (s *Shard) subscribe(stream brokerv1.Shard_SubscribeServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return apierr.InvalidArgument(apierr.FieldViolation{Field: "start", Description: "the first frame must be start"})
	}
	if bad := validate.Start(&sundialv1.Start{
		Topic: start.GetTopic(), Group: start.GetGroup(), MaxInFlight: start.GetCredit(),
		VisibilityTimeoutMs: start.GetVisibilityTimeoutMs(), AckMode: start.GetAckMode(),
		MaxDeliveriesPerFrame: start.GetMaxDeliveriesPerFrame(),
	}); len(bad) > 0 {
		return apierr.InvalidArgument(bad...)
	}
	lead, err := s.leading(start.GetShardId())
	if err != nil {
		return err
	}
	group := start.GetGroup()
	if group == "" {
		group = meta.DefaultGroup
	}
	if err := s.ensureGroup(stream.Context(), lead, start.GetTopic(), group); err != nil {
		return err
	}
	if start.GetSendStarted() {
		// ensureGroup answered: the group is registered on every shard.
		started := &sundialv1.Started{Topic: start.GetTopic(), Group: group}
		if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Started{Started: started}}); err != nil {
			return err
		}
	}
	visibility := time.Duration(start.GetVisibilityTimeoutMs()) * time.Millisecond
	if visibility == 0 {
		visibility = s.topicVisibility(start.GetTopic())
	}
	parts := start.GetPartitions()
	if len(parts) == 0 {
		parts = []uint32{0}
	}
	// What a round pushed together goes out together, up to the frame
	// size the stream asked for (0: one delivery per frame).
	perFrame := int(start.GetMaxDeliveriesPerFrame())
	c := dispatch.NewConsumer(start.GetTopic(), group, parts, visibility, start.GetAckMode() == sundialv1.AckMode_ACK_MODE_AT_MOST_ONCE, int(start.GetCredit()))
	lead.Dispatcher.Attach(c)
	defer lead.Dispatcher.Detach(c)

	recvErr := make(chan error, 1)
	returned := make(chan int, 16) // revoked credit to report, in order
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if cr := req.GetCredit(); cr != nil && cr.GetN() > 0 {
				lead.Dispatcher.AddCredit(c, int(cr.GetN()))
			}
			if rv := req.GetRevoke(); rv != nil && rv.GetN() > 0 {
				select {
				case returned <- lead.Dispatcher.Revoke(c, int(rv.GetN())):
				case <-stream.Context().Done():
					return
				}
			}
		}
	}()
	for {
		select {
		case n := <-returned:
			// Deliveries already taken went out before this answer, so the
			// proxy's count of this stream's credit stays exact.
			if err := sendFrames(stream, c.Take(), perFrame); err != nil {
				return err
			}
			if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_CreditReturned{CreditReturned: &sundialv1.Credit{N: int32(n)}}}); err != nil {
				return err
			}
		case <-c.Ready():
			if err := sendFrames(stream, c.Take(), perFrame); err != nil {
				return err
			}
		case <-c.Closed():
			_, err := s.leading(start.GetShardId())
			if err == nil {
				err = status.Error(codes.Unavailable, "shard dispatcher restarted")
			}
			return err
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				// The proxy closed its side to end the stream (a Receive
				// over several shards got what it waited for): send what
				// was already leased for it, then end cleanly; Detach gives
				// back what a round pushes later.
				return sendFrames(stream, c.Take(), perFrame)
			}
			return err
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// sendFrames sends ds in order, at most perFrame per frame.
func sendFrames(stream brokerv1.Shard_SubscribeServer, ds []*sundialv1.Delivery, perFrame int) error {
	for _, f := range frame.Pack(ds, perFrame) {
		if err := stream.Send(f); err != nil {
			return err
		}
	}
	return nil
}

func (s *Shard) topicVisibility(topic string) time.Duration {
	if t, ok := s.meta.Meta().Topics[topic]; ok && t.VisibilityTimeoutMs > 0 {
		return time.Duration(t.VisibilityTimeoutMs) * time.Millisecond
	}
	return s.opts.DefaultVisibilityTimeout
}

// Ack completes deliveries.
func (s *Shard) Ack(ctx context.Context, req *brokerv1.ShardAckRequest) (*sundialv1.AckResponse, error) {
	results, err := s.settle(ctx, req.GetShardId(), req.GetReceipts(), func(refs []*fsmpb.MessageRef, _ int64) *fsmpb.Command {
		return &fsmpb.Command{Kind: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{Refs: refs, NowMs: s.opts.Now().UnixMilli()}}}
	})
	s.metrics.settled("ack", results)
	return &sundialv1.AckResponse{Results: results}, err
}

// Nack gives deliveries back for redelivery after the delay.
func (s *Shard) Nack(ctx context.Context, req *brokerv1.ShardNackRequest) (*sundialv1.NackResponse, error) {
	if bad := validate.NackDelayMs("delay_ms", req.GetDelayMs(), s.opts.Limits); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	results, err := s.settle(ctx, req.GetShardId(), req.GetReceipts(), func(refs []*fsmpb.MessageRef, nowMs int64) *fsmpb.Command {
		nack := &fsmpb.Nack{Refs: refs, VisibleAtMs: nowMs + req.GetDelayMs(), Reason: req.GetReason()}
		if req.GetDelayMs() == 0 {
			nack.VisibleAtEachMs = make([]int64, len(refs))
			for i, ref := range refs {
				nack.VisibleAtEachMs[i] = nowMs + s.backoff(ref).Milliseconds()
			}
		}
		return &fsmpb.Command{Kind: &fsmpb.Command_Nack{Nack: nack}}
	})
	s.metrics.settled("nack", results)
	return &sundialv1.NackResponse{Results: results}, err
}

// Extend moves lease deadlines.
func (s *Shard) Extend(ctx context.Context, req *brokerv1.ShardExtendRequest) (*sundialv1.ExtendResponse, error) {
	if bad := validate.ExtendMs("extend_ms", req.GetExtendMs()); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	var deadline int64
	results, err := s.settle(ctx, req.GetShardId(), req.GetReceipts(), func(refs []*fsmpb.MessageRef, nowMs int64) *fsmpb.Command {
		ext := req.GetExtendMs()
		if ext == 0 {
			ext = s.opts.DefaultVisibilityTimeout.Milliseconds()
		}
		deadline = nowMs + ext
		return &fsmpb.Command{Kind: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Refs: refs, DeadlineMs: deadline}}}
	})
	for _, r := range results {
		if r.Error == nil {
			r.LeaseDeadlineUnixMs = deadline
		}
	}
	s.metrics.settled("extend", results)
	return &sundialv1.ExtendResponse{Results: results}, err
}

// settle parses receipts, proposes one command for the valid ones and
// answers one result per receipt, in order.
func (s *Shard) settle(ctx context.Context, shardID uint64, receipts []string, build func([]*fsmpb.MessageRef, int64) *fsmpb.Command) ([]*sundialv1.ReceiptResult, error) {
	if len(receipts) == 0 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "receipts", Description: "must not be empty"})
	}
	lead, err := s.leading(shardID)
	if err != nil {
		return nil, err
	}
	results := make([]*sundialv1.ReceiptResult, len(receipts))
	var refs []*fsmpb.MessageRef
	var at []int
	for i, text := range receipts {
		results[i] = &sundialv1.ReceiptResult{Receipt: text}
		r, err := receipt.Parse(text)
		switch {
		case err != nil:
			results[i].Error = statusProto(codes.InvalidArgument, "receipt is malformed: pass the receipt string of a delivery unchanged")
		case r.Shard() != shardID:
			results[i].Error = statusProto(codes.InvalidArgument, "receipt belongs to another shard")
		default:
			refs = append(refs, &fsmpb.MessageRef{MessageId: r.Message[:], Group: r.Group, Attempt: r.Attempt})
			at = append(at, i)
		}
	}
	if len(refs) == 0 {
		return results, nil
	}
	out, err := lead.Proposer.Propose(ctx, build(refs, s.opts.Now().UnixMilli()))
	if err != nil {
		return nil, err
	}
	for j, code := range out.GetCodes() {
		switch code {
		case fsmpb.RefCode_REF_CODE_NOT_FOUND:
			results[at[j]].Error = statusProto(codes.NotFound, "no delivery of this receipt is in flight: it was acked already or never existed")
		case fsmpb.RefCode_REF_CODE_STALE:
			results[at[j]].Error = statusProto(codes.FailedPrecondition, "receipt is stale: the message was nacked or delivered again since this attempt")
		}
	}
	return results, nil
}

// backoff is the redelivery delay after a nack without delay: the topic's
// base doubled per attempt, capped, with jitter in [d/2, d].
func (s *Shard) backoff(ref *fsmpb.MessageRef) time.Duration {
	base, ceiling := time.Second, 5*time.Minute
	// The topic is not in the receipt: the copy's topic is, on disk.
	if t := s.copyTopic(ref); t != nil {
		if t.BackoffBaseMs > 0 {
			base = time.Duration(t.BackoffBaseMs) * time.Millisecond
		}
		if t.BackoffMaxMs > 0 {
			ceiling = time.Duration(t.BackoffMaxMs) * time.Millisecond
		}
	}
	d := base
	for i := uint32(1); i < ref.Attempt && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func statusProto(code codes.Code, msg string) *spb.Status {
	return status.New(code, msg).Proto()
}

func fieldIndex(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}
