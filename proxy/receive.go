package proxy

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/frame"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/fanout"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// receiveWiden is how long a Receive over several shards waits on the
// shards holding its max_messages share before it asks the others too. A
// shard with something ready answers within a dispatch round
// (milliseconds), so where deliveries are ready on the shards first asked
// nobody else is asked.
const receiveWiden = 100 * time.Millisecond

// givenBackDelayMs is the nack delay of a surplus copy given back: 1 ms
// makes it visible again at once (a delay of 0 would apply the topic's
// retry backoff).
const givenBackDelayMs = 1

// Receive is the pull API: it waits up to wait_ms for at least one
// delivery of the topic, on whichever partition it becomes ready, and
// answers at most max_messages. A topic on one shard gets one Shard.Receive
// with the whole wait. On several shards it runs Shard.Subscribe streams
// whose credit is max_messages split exactly over the shards
// (fanout.Split, starting at a random shard); see receiveCall.wide for how
// it widens and ends them.
func (c consumer) Receive(ctx context.Context, req *sundialv1.ReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	if vs := validate.Receive(req); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	principal := principalOf(ctx)
	if err := c.s.quota.Receive(ctx, principal); err != nil {
		return nil, err
	}
	resp, err := c.s.receive(ctx, req)
	c.s.quota.Received(principal, len(resp.GetDeliveries()))
	return resp, err
}

func (s *Server) receive(ctx context.Context, req *sundialv1.ReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	table, err := s.tableFor(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	if err := s.newGroup(ctx, table, req.GetTopic(), req.GetGroup()); err != nil {
		return nil, err
	}
	byShard := table.TopicShards(req.GetTopic())
	ids := fanout.SortedShards(byShard)
	if len(ids) == 0 {
		return nil, status.Error(codes.Unavailable, "routing table has no event shards")
	}
	r := receiveCall{s: s, req: req, group: req.GetGroup(), byShard: byShard, want: int64(max(req.GetMaxMessages(), 1))}
	if r.group == "" {
		r.group = validate.DefaultGroup
	}
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	if len(ids) > 1 {
		return r.wide(ctx, ids, wait)
	}
	ds, err := r.one(ctx, ids[0], wait)
	if len(ds) > 0 {
		// Leased deliveries go to the client even when the call failed.
		return &sundialv1.ReceiveResponse{Deliveries: ds}, nil
	}
	if err != nil {
		return nil, err
	}
	return &sundialv1.ReceiveResponse{}, nil
}

// receiveCall is one client Receive being served.
type receiveCall struct {
	s       *Server
	req     *sundialv1.ReceiveRequest
	group   string
	byShard map[uint64][]uint32
	want    int64
}

// one asks the topic's only shard for everything, waiting up to wait.
func (r receiveCall) one(ctx context.Context, shard uint64, wait time.Duration) ([]*sundialv1.Delivery, error) {
	sreq := &brokerv1.ShardReceiveRequest{ShardId: shard, Partitions: r.byShard[shard], Request: proto.CloneOf(r.req)}
	sreq.Request.Group = r.group
	sreq.Request.MaxMessages = int32(r.want)
	var resp *sundialv1.ReceiveResponse
	err := r.s.fwd.DoFor(ctx, shard, r.s.cfg.ForwardTimeout+wait, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = brokerv1.NewShardClient(conn).Receive(ctx, sreq)
		return err
	})
	ds := resp.GetDeliveries()
	if int64(len(ds)) > r.want {
		// A broker bug: it leased more than asked.
		r.s.log.Error("shard delivered more than asked", zap.Uint64("shard_id", shard), zap.Int64("asked", r.want), zap.Int("got", len(ds)))
		r.s.giveBack(ctx, shard, ds[r.want:])
		ds = ds[:r.want]
	}
	return ds, err
}

// receiveAnswer is what one shard stream of a wide Receive sent: some
// deliveries, or (done) its end.
type receiveAnswer struct {
	shard uint64
	ds    []*sundialv1.Delivery
	done  bool
	err   error
}

// wide serves a Receive over several shards. Each shard with a share of
// max_messages gets a Shard.Subscribe stream with that much credit. The
// first deliveries to arrive, or the end of the wait, end every stream by
// closing its send side: the shard then sends what it already leased for
// the stream and ends it, and gives back (nacks) whatever a round pushed
// later, so ending a stream loses nothing, unlike cancelling a call whose
// answer may be in flight.
//
// When nothing arrived within receiveWiden, an at-least-once Receive also
// opens a stream with credit 1 on every other shard, so the wait is
// topic-wide; deliveries beyond max_messages (shards answering at once)
// are given back with a nack at once, and count an attempt as any lease
// does. An at-most-once copy cannot be given back (its lease removed it),
// so an at-most-once Receive never holds more credit than max_messages:
// each receiveWiden with nothing it ends its streams and moves their
// credit on to the next shards in turn.
func (r receiveCall) wide(ctx context.Context, ids []uint64, wait time.Duration) (*sundialv1.ReceiveResponse, error) {
	atMostOnce := r.req.GetAckMode() == sundialv1.AckMode_ACK_MODE_AT_MOST_ONCE
	answers := make(chan receiveAnswer)
	stops := map[uint64]chan struct{}{} // open streams, nil once told to end
	open := func(sh fanout.Share) {
		stop := make(chan struct{})
		stops[sh.Shard] = stop
		go func() {
			err := r.stream(ctx, sh, stop, answers)
			answers <- receiveAnswer{shard: sh.Shard, done: true, err: err}
		}()
	}
	ending := false
	endAll := func() {
		for id, stop := range stops {
			if stop != nil {
				close(stop)
				stops[id] = nil
			}
		}
	}
	offset := rand.IntN(len(ids))
	for _, sh := range fanout.Split(r.want, ids, offset) {
		open(sh)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	widen := time.NewTimer(receiveWiden)
	defer widen.Stop()
	rotate := false // at most once: open the next shares once these ended
	var got []*sundialv1.Delivery
	surplus := map[uint64][]*sundialv1.Delivery{}
	var firstErr error
	for len(stops) > 0 {
		select {
		case a := <-answers:
			if a.done {
				delete(stops, a.shard)
				if a.err != nil && firstErr == nil && ctx.Err() == nil {
					firstErr = a.err
				}
				if len(stops) == 0 && rotate && !ending && len(got) == 0 {
					rotate = false
					offset += int(r.want) // the shards after those just asked
					for _, sh := range fanout.Split(r.want, ids, offset) {
						open(sh)
					}
					widen.Reset(receiveWiden)
				}
				continue
			}
			for _, d := range a.ds {
				if int64(len(got)) < r.want {
					got = append(got, d)
				} else {
					surplus[a.shard] = append(surplus[a.shard], d)
				}
			}
			ending = true
			endAll()
		case <-deadline.C:
			ending = true
			endAll()
		case <-widen.C:
			if ending || r.want >= int64(len(ids)) {
				continue // every shard has a share already
			}
			if atMostOnce {
				rotate = true
				endAll()
				continue
			}
			for _, id := range ids {
				if _, asked := stops[id]; !asked {
					open(fanout.Share{Shard: id, N: 1})
				}
			}
		case <-ctx.Done():
			ending = true
			endAll()
		}
	}
	for shard, ds := range surplus {
		r.s.giveBack(ctx, shard, ds)
	}
	if len(got) > 0 {
		// Leased deliveries go to the client even when another shard failed.
		return &sundialv1.ReceiveResponse{Deliveries: got}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return &sundialv1.ReceiveResponse{}, nil
}

// stream runs one shard's Shard.Subscribe stream of a wide Receive with
// credit sh.N, sending what arrives to answers, until the shard ends it
// after stop is closed (or its credit is spent). A stream that breaks
// before is opened again (forward.DoFor) with the credit left.
func (r receiveCall) stream(ctx context.Context, sh fanout.Share, stop <-chan struct{}, answers chan<- receiveAnswer) error {
	var taken int64
	opened := false
	return r.s.fwd.DoFor(ctx, sh.Shard, r.s.cfg.ForwardTimeout+time.Duration(r.req.GetWaitMs())*time.Millisecond, func(ctx context.Context, conn *grpc.ClientConn) error {
		left := sh.N - taken
		stopped := stop
		// The first try opens its stream even when the Receive is already
		// ending (a wait of 0): a shard stream's start makes the group
		// exist on every shard of the topic (the broker's ensureGroup)
		// before the stream ends, so a group's first Receive has created
		// it when it answers.
		if opened {
			select {
			case <-stopped:
				return nil
			default:
			}
		}
		opened = true
		if left <= 0 {
			return nil
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := brokerv1.NewShardClient(conn).Subscribe(ctx)
		if err != nil {
			return err
		}
		start := &brokerv1.ShardStart{
			ShardId: sh.Shard, Topic: r.req.GetTopic(), Group: r.group, Partitions: r.byShard[sh.Shard],
			VisibilityTimeoutMs: r.req.GetVisibilityTimeoutMs(), AckMode: r.req.GetAckMode(),
			Credit: int32(left), MaxDeliveriesPerFrame: validate.MaxDeliveriesPerFrame,
		}
		if err := st.Send(&brokerv1.ShardSubscribeRequest{Kind: &brokerv1.ShardSubscribeRequest_Start{Start: start}}); err != nil {
			_, rerr := st.Recv() // the stream's status explains a failed send
			return rerr
		}
		frames := make(chan []*sundialv1.Delivery)
		var recvErr error
		go func() {
			defer close(frames)
			for {
				resp, err := st.Recv()
				if err != nil {
					recvErr = err
					return
				}
				if ds := frame.Deliveries(resp); len(ds) > 0 {
					frames <- ds
				}
			}
		}()
		closed := false
		end := func() {
			if !closed {
				closed = true
				_ = st.CloseSend()
			}
		}
		for {
			select {
			case ds, ok := <-frames:
				if !ok {
					switch {
					case closed:
						// Whatever the stream's status, it ended after
						// sending all it leased for us.
						return nil
					case errors.Is(recvErr, io.EOF):
						return status.Errorf(codes.Unavailable, "shard %d receive stream closed by broker", sh.Shard)
					}
					return recvErr
				}
				taken += int64(len(ds))
				answers <- receiveAnswer{shard: sh.Shard, ds: ds}
				if taken >= sh.N {
					end()
				}
			case <-stopped:
				stopped = nil
				end()
			}
		}
	})
}

// giveBack nacks copies shard leased for a Receive that cannot answer
// them, so they are visible again at once instead of after their
// visibility timeout. It runs past the client's cancellation, bounded by
// the forward timeout; a copy whose give-back fails is redelivered when its
// lease ends.
func (s *Server) giveBack(ctx context.Context, shard uint64, ds []*sundialv1.Delivery) {
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.GetReceipt()
	}
	s.metrics.receiveGivenBack.Add(float64(len(receipts)))
	err := s.fwd.DoUncut(context.WithoutCancel(ctx), shard, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := brokerv1.NewShardClient(conn).Nack(ctx, &brokerv1.ShardNackRequest{ShardId: shard, Receipts: receipts, DelayMs: givenBackDelayMs, Reason: "receive surplus given back"})
		return err
	})
	if err != nil {
		s.log.Warn("give back receive surplus", zap.Uint64("shard_id", shard), zap.Int("copies", len(receipts)), zap.Error(err))
	}
}
