// Package subscribe serves Consumer.Subscribe: it opens one Shard.Subscribe
// stream per event shard holding the topic's partitions, splits the
// client's credit over them (Splitter), merges their deliveries into the
// client stream (a shard stream sends several deliveries ready together in
// one frame; the client gets frames as large as its Start asked for, or
// one delivery per frame), reopens a broken shard stream at the shard's new leader
// carrying its unspent credit over, and answers acks, nacks and extends
// sent on the stream.
//
// Goroutines of one subscription, all joined before Serve returns (except
// the client reader, which gRPC unblocks when Serve returns): the client
// reader, one runner per shard stream plus its credit sender, the planner,
// the credit rebalancer once there is more than one shard, and one per
// in-flight ack operation (at most maxAckOps). session.mu guards the
// shard set, the splitter and every shard's pending credit and partitions;
// sendMu serialises writes to the client stream. Lock order: mu before
// sendMu is never needed; neither is held across a network call except
// sendMu across Send.
//
// The plan (which shard streams read which partitions) comes from the
// routing table, with the partition count asked from meta while the table
// does not list the topic yet. The planner re-plans on every table change:
// it opens streams on shards that gained partitions of the topic, reopens
// a stream whose partitions changed or whose broker the table no longer
// names as the shard's leader, and closes one that lost them all, handing
// its credit to the others.
package subscribe

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/frame"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/forward"
	"github.com/sundialmq/sundial/proxy/internal/routing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// maxAckOps bounds the ack operations of one stream handled at once.
const maxAckOps = 4096

// streamHealthy is how long a shard stream must have lived for its
// reconnect backoff to reset.
const streamHealthy = time.Second

// Settler answers acks, nacks and extends; results are in receipt order.
type Settler interface {
	Ack(ctx context.Context, req *sundialv1.AckRequest) []*sundialv1.ReceiptResult
	Nack(ctx context.Context, req *sundialv1.NackRequest) []*sundialv1.ReceiptResult
	Extend(ctx context.Context, req *sundialv1.ExtendRequest) []*sundialv1.ReceiptResult
}

// Tables gives the current routing table and announces the next one.
type Tables interface {
	forward.Tables
	Changed() <-chan struct{}
}

// Handler serves subscriptions.
type Handler struct {
	Tables Tables
	// Topics answers partition counts of topics the table does not list
	// yet; nil takes such a topic for one partition.
	Topics    *routing.Topics
	Pool      *routing.Pool
	Forwarder *forward.Forwarder
	Settler   Settler
	Log       *zap.Logger
	Metrics   *Metrics
	// WaitTimeout bounds the wait for a routing table at the start.
	WaitTimeout time.Duration
	// Limits bound ack, nack and extend frames (validate.Settle); a frame
	// beyond them ends the subscription with InvalidArgument and applies
	// nothing.
	Limits validate.Limits
	// Pace, when set, holds the credit the client grants until its
	// principal may receive that much: it waits and answers how much of n
	// (at least 1 unless it fails) may be granted now. Deliveries then
	// arrive at the principal's receive rate, leased only when they can
	// go out.
	Pace func(ctx context.Context, n int) (int, error)
	// NewGroup, when set, admits a subscription to a group the routing
	// table's route of its topic does not list (the subscription creates
	// it): its error refuses the stream.
	NewGroup func(ctx context.Context, table *routing.Table, topic, group string) error
}

// Serve runs one subscription until the client ends it or a shard fails
// for good.
func (h *Handler) Serve(stream sundialv1.Consumer_SubscribeServer) error {
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	start := first.GetStart()
	if start == nil {
		return apierr.InvalidArgument(apierr.FieldViolation{Field: "start", Description: "first frame must be start"})
	}
	if vs := validate.Start(start); len(vs) > 0 {
		return apierr.InvalidArgument(vs...)
	}
	changed := h.Tables.Changed()
	wctx, cancel := context.WithTimeout(stream.Context(), h.WaitTimeout)
	table, err := h.Tables.Wait(wctx)
	if err == nil {
		table, err = h.resolve(wctx, table, start.GetTopic())
	}
	cancel()
	if err != nil {
		return err
	}
	if h.NewGroup != nil {
		if err := h.NewGroup(stream.Context(), table, start.GetTopic(), start.GetGroup()); err != nil {
			return err
		}
	}
	byShard := table.TopicShards(start.GetTopic())
	if len(byShard) == 0 {
		return status.Error(codes.Unavailable, "routing table has no event shards")
	}
	group := start.GetGroup()
	if group == "" {
		group = validate.DefaultGroup
	}
	ctx, cancelAll := context.WithCancel(stream.Context())
	defer cancelAll()
	s := &session{
		h:      h,
		stream: stream,
		ctx:    ctx,
		start: &brokerv1.ShardStart{
			Topic:               start.GetTopic(),
			Group:               group,
			VisibilityTimeoutMs: start.GetVisibilityTimeoutMs(),
			AckMode:             start.GetAckMode(),
			SendStarted:         start.GetSendStarted(),
		},
		perFrame: int(start.GetMaxDeliveriesPerFrame()),
		shards:   make(map[uint64]*shardStream, len(byShard)),
		fatal:    make(chan error, 1),
		ackSem:   make(chan struct{}, maxAckOps),
	}
	ids := make([]uint64, 0, len(byShard))
	for id, parts := range byShard {
		ids = append(ids, id)
		s.shards[id] = s.newShard(id, parts)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	s.split = NewSplitter(ids)
	if h.Pace != nil {
		s.paced = make(chan struct{}, 1)
		s.runners.Go(s.pace)
	}
	s.grant(int64(start.GetMaxInFlight()))

	h.Metrics.subscriptions.Inc()
	defer h.Metrics.subscriptions.Dec()

	s.mu.Lock()
	for _, id := range ids {
		ss := s.shards[id]
		s.runners.Go(func() { s.runShard(ss) })
	}
	s.startRebalance()
	s.mu.Unlock()
	s.runners.Go(func() { s.plan(changed) })
	readerDone := make(chan error, 1)
	go func() { readerDone <- s.read() }()

	select {
	case err = <-readerDone:
	case err = <-s.fatal:
	}
	cancelAll()
	s.runners.Wait()
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.acks.Wait()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type shardStream struct {
	id     uint64
	wake   chan struct{}      // cap 1: pending or revoke changed
	ctx    context.Context    // ends when the plan drops the shard or the subscription ends
	cancel context.CancelFunc // ends ctx
	// Guarded by session.mu:
	partitions []uint32           // the topic's partitions on this shard, ascending
	reopen     context.CancelFunc // ends the current stream so it reopens with new partitions
	addr       string             // the broker the current (or last) stream was opened at
	replanned  bool               // the current stream ended for a re-plan: reopen at once
	pending    int64              // credit granted but not yet sent
	revoke     int64              // credit to ask back, not yet sent
	revoking   bool               // a revoke awaits its credit_returned
	active     time.Time          // last delivery, or when the stream got its credit
}

type session struct {
	h      *Handler
	stream sundialv1.Consumer_SubscribeServer
	ctx    context.Context // ends with the subscription; owned by Serve
	start  *brokerv1.ShardStart
	// perFrame is the client's max_deliveries_per_frame (0: one each).
	perFrame int
	// started sends the client its started frame once (the stream's Start
	// asked for one): later shards' frames are not relayed.
	started sync.Once
	fatal   chan error // cap 1: the first permanent shard failure
	ackSem  chan struct{}
	acks    sync.WaitGroup
	// runners are the shard runners, the planner and the rebalancer; the
	// planner adds runners while it runs itself, so the count is never
	// zero while one is added.
	runners sync.WaitGroup

	mu          sync.Mutex // guards shards, split, the shardStreams' planned state, closing, rebalancing
	shards      map[uint64]*shardStream
	split       *Splitter
	closing     bool
	rebalancing bool

	sendMu sync.Mutex // serialises stream.Send

	// With Handler.Pace, the client's credit waits in unpaced until the
	// pacer grants it; paced (cap 1) says it grew.
	paced   chan struct{}
	unpaced atomic.Int64
}

// grant hands the client's credit n to the shards, through the pacer when
// the Handler paces.
func (s *session) grant(n int64) {
	if s.paced != nil {
		s.unpaced.Add(n)
		select {
		case s.paced <- struct{}{}:
		default:
		}
		return
	}
	s.give(n)
}

func (s *session) give(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply(s.split.Grant(n))
}

// pace grants the client's credit as fast as Handler.Pace allows, until
// the subscription ends.
func (s *session) pace() {
	for {
		select {
		case <-s.paced:
		case <-s.ctx.Done():
			return
		}
		for {
			n := s.unpaced.Load()
			if n <= 0 {
				break
			}
			k, err := s.h.Pace(s.ctx, int(min(n, math.MaxInt32)))
			if err != nil || k <= 0 {
				return
			}
			s.unpaced.Add(-int64(k))
			s.give(int64(k))
		}
	}
}

// apply queues grants on their shard streams; s.mu must be held.
func (s *session) apply(gs []Grant) {
	for _, g := range gs {
		ss := s.shards[g.Shard]
		if s.split.Held(g.Shard) == g.N {
			ss.active = time.Now() // it had none: its idle time starts now
		}
		ss.pending += g.N
		select {
		case ss.wake <- struct{}{}:
		default:
		}
	}
}

func (s *session) send(resp *sundialv1.SubscribeResponse) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(resp)
}

// read handles client frames until the client stream ends.
func (s *session) read() error {
	for {
		req, err := s.stream.Recv()
		if err != nil {
			return err
		}
		switch k := req.GetKind().(type) {
		case *sundialv1.SubscribeRequest_Credit:
			s.grant(int64(k.Credit.GetN()))
		case *sundialv1.SubscribeRequest_Ack:
			if vs := validate.Settle("ack", k.Ack.GetReceipts(), k.Ack.GetRequestId(), s.h.Limits); len(vs) > 0 {
				return apierr.InvalidArgument(vs...)
			}
			s.settle(sundialv1.AckResult_OP_ACK, k.Ack.GetRequestId(), func(ctx context.Context) []*sundialv1.ReceiptResult {
				return s.h.Settler.Ack(ctx, k.Ack)
			})
		case *sundialv1.SubscribeRequest_Nack:
			if vs := validate.Settle("nack", k.Nack.GetReceipts(), k.Nack.GetRequestId(), s.h.Limits); len(vs) > 0 {
				return apierr.InvalidArgument(vs...)
			}
			s.settle(sundialv1.AckResult_OP_NACK, k.Nack.GetRequestId(), func(ctx context.Context) []*sundialv1.ReceiptResult {
				return s.h.Settler.Nack(ctx, k.Nack)
			})
		case *sundialv1.SubscribeRequest_Extend:
			if vs := validate.Settle("extend", k.Extend.GetReceipts(), k.Extend.GetRequestId(), s.h.Limits); len(vs) > 0 {
				return apierr.InvalidArgument(vs...)
			}
			s.settle(sundialv1.AckResult_OP_EXTEND, k.Extend.GetRequestId(), func(ctx context.Context) []*sundialv1.ReceiptResult {
				return s.h.Settler.Extend(ctx, k.Extend)
			})
		case *sundialv1.SubscribeRequest_Start:
			return apierr.InvalidArgument(apierr.FieldViolation{Field: "start", Description: "start may be sent only once"})
		default:
			return apierr.InvalidArgument(apierr.FieldViolation{Field: "kind", Description: "unknown frame"})
		}
	}
}

// settle runs one ack operation in the background, at most maxAckOps at
// once (the reader blocks beyond that), and answers with an AckResult.
func (s *session) settle(op sundialv1.AckResult_Op, requestID string, run func(context.Context) []*sundialv1.ReceiptResult) {
	select {
	case s.ackSem <- struct{}{}:
	case <-s.ctx.Done():
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.ackSem
		return
	}
	s.acks.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.acks.Done()
		defer func() { <-s.ackSem }()
		results := run(s.ctx)
		_ = s.send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_AckResult{AckResult: &sundialv1.AckResult{
			Op: op, RequestId: requestID, Results: results,
		}}})
	}()
}

// runShard keeps one shard stream open until the subscription ends.
func (s *session) runShard(ss *shardStream) {
	backoff := forward.MinBackoff
	redirects := 0
	for ss.ctx.Err() == nil {
		addr := s.h.Forwarder.Leader(ss.id)
		var err error
		began := time.Now()
		if addr == "" {
			err = status.Errorf(codes.Unavailable, "shard %d has no known replica", ss.id)
		} else {
			err = s.streamOnce(ss, addr)
		}
		if ss.ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		replanned := ss.replanned
		ss.replanned = false
		s.mu.Unlock()
		if replanned {
			continue
		}
		if time.Since(began) > streamHealthy {
			backoff = forward.MinBackoff
		}
		v := s.h.Forwarder.Observe(ss.id, addr, err)
		if v == forward.Fail && apierr.Classify(err) == apierr.Permanent {
			s.h.Log.Warn("shard subscription failed", zap.Uint64("shard_id", ss.id), zap.Error(err))
			select {
			case s.fatal <- err:
			default:
			}
			return
		}
		if v == forward.RetryNow && redirects < 3 {
			redirects++
			continue
		}
		redirects = 0
		s.h.Metrics.reopens.Inc()
		s.h.Log.Debug("shard subscription reopening", zap.Uint64("shard_id", ss.id), zap.String("broker_addr", addr), zap.Error(err), zap.Duration("backoff", backoff))
		if !forward.Sleep(ss.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, forward.MaxBackoff)
	}
}

// streamOnce runs one Shard.Subscribe stream at addr until it breaks.
func (s *session) streamOnce(ss *shardStream, addr string) error {
	conn, err := s.h.Pool.Conn(addr)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	ctx, cancel := context.WithCancel(ss.ctx)
	defer cancel()
	st, err := brokerv1.NewShardClient(conn).Subscribe(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	credit := s.split.Held(ss.id)
	ss.pending, ss.revoke, ss.revoking, ss.active = 0, 0, false, time.Now()
	ss.reopen, ss.replanned, ss.addr = cancel, false, addr
	partitions := ss.partitions
	s.mu.Unlock()
	start := &brokerv1.ShardStart{
		ShardId:             ss.id,
		Topic:               s.start.GetTopic(),
		Group:               s.start.GetGroup(),
		Partitions:          partitions,
		VisibilityTimeoutMs: s.start.GetVisibilityTimeoutMs(),
		AckMode:             s.start.GetAckMode(),
		SendStarted:         s.start.GetSendStarted(),
		Credit:              clamp32(credit),
		// Always batched on this hop; relay repacks for the client.
		MaxDeliveriesPerFrame: validate.MaxDeliveriesPerFrame,
	}
	if err := st.Send(&brokerv1.ShardSubscribeRequest{Kind: &brokerv1.ShardSubscribeRequest_Start{Start: start}}); err != nil {
		_, rerr := st.Recv() // the stream's status explains a failed send
		return rerr
	}
	var sender sync.WaitGroup
	sender.Go(func() { s.sendCredit(ctx, ss, st) })
	defer sender.Wait()
	defer cancel()
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return status.Errorf(codes.Unavailable, "shard %d stream closed by broker", ss.id)
			}
			return err
		}
		if resp.GetStarted() != nil {
			// The first shard's started frame says the group is on every
			// shard (its ensureGroup covers the topic); the client gets
			// that one. Every shard sends its own before its deliveries,
			// and Do returns only once the first was sent, so the client
			// sees it before any delivery.
			var err error
			s.started.Do(func() { err = s.send(resp) })
			if err != nil {
				return err
			}
			continue
		}
		if cr := resp.GetCreditReturned(); cr != nil {
			s.mu.Lock()
			ss.revoking = false
			s.apply(s.split.Return(ss.id, int64(cr.GetN())))
			s.mu.Unlock()
			continue
		}
		ds := frame.Deliveries(resp)
		if len(ds) == 0 {
			continue
		}
		s.mu.Lock()
		ss.active = time.Now()
		s.apply(s.split.Spend(ss.id, int64(len(ds))))
		s.mu.Unlock()
		if err := s.relay(resp, ds); err != nil {
			return err
		}
		s.h.Metrics.delivered.Add(float64(len(ds)))
		s.h.Metrics.frames.Inc()
		sent := time.Now()
		for _, d := range ds {
			if d.GetAttempt() == 1 {
				s.h.Metrics.lateness.Observe(max(sent.Sub(time.UnixMilli(d.GetDueAtUnixMs())).Seconds(), 0))
			}
		}
	}
}

// relay passes the deliveries ds of a shard frame resp to the client: as
// they came when the client takes frames that large, else repacked to
// its max_deliveries_per_frame (one per frame for a client that did not
// ask). Nothing waits to fill a frame.
func (s *session) relay(resp *sundialv1.SubscribeResponse, ds []*sundialv1.Delivery) error {
	if len(ds) == 1 && resp.GetDelivery() != nil || len(ds) > 1 && len(ds) <= s.perFrame {
		return s.send(resp)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	for _, f := range frame.Pack(ds, s.perFrame) {
		if err := s.stream.Send(f); err != nil {
			return err
		}
	}
	return nil
}

// idleRevokeAfter is how long a shard may sit on credit without delivering
// while another shard has none, before the proxy asks for it back.
const idleRevokeAfter = 100 * time.Millisecond

// rebalance moves credit off quiet shards while others have none: without
// it a subscriber granting less credit than its topic has shards could
// wait forever on a shard with nothing due.
func (s *session) rebalance() {
	t := time.NewTicker(idleRevokeAfter / 2)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		starved := false
		for id := range s.shards {
			starved = starved || s.split.Held(id) == 0
		}
		if starved && s.split.Pool() == 0 {
			now := time.Now()
			for id, ss := range s.shards {
				if h := s.split.Held(id); h > 0 && !ss.revoking && now.Sub(ss.active) >= idleRevokeAfter {
					ss.revoke, ss.revoking = h, true
					select {
					case ss.wake <- struct{}{}:
					default:
					}
				}
			}
		}
		s.mu.Unlock()
	}
}

// sendCredit forwards ss's pending credit to its stream until ctx ends.
func (s *session) sendCredit(ctx context.Context, ss *shardStream, st brokerv1.Shard_SubscribeClient) {
	for {
		select {
		case <-ss.wake:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		n, revoke := ss.pending, ss.revoke
		ss.pending, ss.revoke = 0, 0
		s.mu.Unlock()
		if revoke > 0 {
			if err := st.Send(&brokerv1.ShardSubscribeRequest{Kind: &brokerv1.ShardSubscribeRequest_Revoke{Revoke: &sundialv1.Credit{N: clamp32(revoke)}}}); err != nil {
				return
			}
		}
		for n > 0 {
			c := clamp32(n)
			n -= int64(c)
			if err := st.Send(&brokerv1.ShardSubscribeRequest{Kind: &brokerv1.ShardSubscribeRequest_Credit{Credit: &sundialv1.Credit{N: c}}}); err != nil {
				return // Recv sees the stream's error
			}
		}
	}
}

func clamp32(n int64) int32 {
	return int32(min(max(n, 0), math.MaxInt32))
}

// resolve is table with topic's partition count from meta when the table
// does not list it yet.
func (h *Handler) resolve(ctx context.Context, table *routing.Table, topic string) (*routing.Table, error) {
	if h.Topics == nil || table.Lists(topic) {
		return table, nil
	}
	return h.Topics.Resolve(ctx, table, topic)
}

// newShard is the stream state of shard reading partitions.
func (s *session) newShard(id uint64, partitions []uint32) *shardStream {
	ctx, cancel := context.WithCancel(s.ctx)
	return &shardStream{id: id, partitions: partitions, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// startRebalance starts the rebalancer once the plan has more than one
// shard; s.mu must be held.
func (s *session) startRebalance() {
	if len(s.shards) > 1 && !s.rebalancing {
		s.rebalancing = true
		s.runners.Go(s.rebalance)
	}
}

// plan re-plans the subscription after each routing table change until
// the subscription ends; changed is the channel of the table the first
// plan was made from.
func (s *session) plan(changed <-chan struct{}) {
	topic := s.start.GetTopic()
	for {
		select {
		case <-changed:
		case <-s.ctx.Done():
			return
		}
		changed = s.h.Tables.Changed()
		table, err := s.h.resolve(s.ctx, s.h.Tables.Table(), topic)
		if err != nil {
			// Meta could not be asked: keep the plan until the next table.
			s.h.Log.Debug("subscription re-plan skipped", zap.String("topic", topic), zap.Error(err))
			continue
		}
		if byShard := table.TopicShards(topic); len(byShard) > 0 {
			s.replan(byShard)
		}
	}
}

// replan moves the subscription onto byShard: new shards get a stream,
// shards whose partitions changed reopen theirs, shards without any give
// their credit to the others and stop.
func (s *session) replan(byShard map[uint64][]uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.ctx.Err() != nil {
		return
	}
	changed := false
	for id, parts := range byShard {
		ss, ok := s.shards[id]
		if !ok {
			ss = s.newShard(id, parts)
			s.shards[id] = ss
			s.runners.Go(func() { s.runShard(ss) })
			s.apply(s.split.Add(id))
			changed = true
			continue
		}
		if !slices.Equal(ss.partitions, parts) {
			ss.partitions = parts
			ss.replanned = true
			if ss.reopen != nil {
				ss.reopen()
			}
			changed = true
			continue
		}
		// The table moved the shard's leader off the broker the stream is
		// on (it froze or was deposed): reopen at the new leader rather
		// than wait for the stream to break (a frozen broker's only by
		// keepalive, ~12 s).
		if lead := s.h.Forwarder.Leader(id); ss.reopen != nil && ss.addr != "" && lead != "" && lead != ss.addr {
			s.h.Log.Debug("shard subscription moves to the new leader", zap.Uint64("shard_id", id), zap.String("from_broker_addr", ss.addr), zap.String("broker_addr", lead))
			ss.replanned = true
			ss.reopen()
			changed = true
		}
	}
	for id, ss := range s.shards {
		if _, ok := byShard[id]; ok {
			continue
		}
		ss.cancel()
		delete(s.shards, id)
		s.apply(s.split.Remove(id))
		changed = true
	}
	s.startRebalance()
	if changed {
		s.h.Metrics.replans.Inc()
		s.h.Log.Info("subscription re-planned", zap.String("topic", s.start.GetTopic()), zap.String("group", s.start.GetGroup()), zap.Int("shards", len(s.shards)))
	}
}
