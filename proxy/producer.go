package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/validate"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// maxStreamPublishes bounds the publishes of one PublishStream in flight.
const maxStreamPublishes = 64

type producer struct {
	sundialv1.UnimplementedProducerServer
	s *Server
}

func (p producer) Publish(ctx context.Context, req *sundialv1.PublishRequest) (*sundialv1.PublishResponse, error) {
	return p.s.publish(ctx, req)
}

// PublishStream handles each request concurrently (at most
// maxStreamPublishes at once) and answers as each completes. A request
// that fails as a whole (invalid, no routing table) is answered with its
// error on every message's result, so the stream stays open for the rest.
func (p producer) PublishStream(stream grpc.BidiStreamingServer[sundialv1.PublishRequest, sundialv1.PublishResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var (
		wg      sync.WaitGroup
		sendMu  sync.Mutex
		sendErr error
	)
	sem := make(chan struct{}, maxStreamPublishes)
	send := func(resp *sundialv1.PublishResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr != nil {
			return
		}
		if err := stream.Send(resp); err != nil {
			sendErr = err
			cancel()
		}
	}
	var recvErr error
	for {
		req, err := stream.Recv()
		if err != nil {
			recvErr = err
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := p.s.publish(ctx, req)
			if err != nil {
				resp = &sundialv1.PublishResponse{RequestId: req.GetRequestId(), Results: make([]*sundialv1.PublishResult, len(req.GetMessages()))}
				st := statusProto(err)
				for i := range resp.Results {
					resp.Results[i] = &sundialv1.PublishResult{Error: st}
				}
			}
			send(resp)
		})
	}
	wg.Wait()
	sendMu.Lock()
	defer sendMu.Unlock()
	if sendErr != nil {
		return sendErr
	}
	if recvErr != nil && !errors.Is(recvErr, io.EOF) {
		return recvErr
	}
	return nil
}

// publish validates req, splits it by shard (asking meta for topics the
// routing table does not list yet), forwards the parts concurrently and
// merges the answers in request order (route).
func (s *Server) publish(ctx context.Context, req *sundialv1.PublishRequest) (*sundialv1.PublishResponse, error) {
	fillTopics(req)
	if vs := validate.Publish(req, s.cfg.Limits, time.Now().UnixMilli()); len(vs) > 0 {
		return nil, apierr.InvalidArgument(vs...)
	}
	textToPayload(req)
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	table, err := s.watcher.Wait(wctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if table.ShardCount() == 0 {
		return nil, status.Error(codes.Unavailable, "routing table has no event shards")
	}
	// The split depends on the request id alone, so a retry reaches the
	// same shards with the same parts and each broker answers its part
	// from its dedup record. A request without an id is split by a random
	// one and not deduplicated.
	rid := req.GetRequestId()
	splitBy := rid
	if splitBy == "" {
		splitBy = newRequestID()
	}
	listed := table
	table, err = s.resolve(ctx, table, req.GetMessages())
	if err != nil {
		return nil, err
	}
	if err := s.quota.Publish(ctx, principalOf(ctx), len(req.GetMessages()), s.newTopics(listed, req.GetMessages())); err != nil {
		return nil, err
	}
	results := s.route(ctx, rid, splitBy, table, req.GetMessages())
	stored := 0
	for _, r := range results {
		if r.GetError() == nil {
			stored++
		}
	}
	s.metrics.published.Add(float64(stored))
	return &sundialv1.PublishResponse{RequestId: req.GetRequestId(), Results: results}, nil
}

// fillTopics gives the request's topic (the {topic} of the HTTP route) to
// its messages that name none; validate.Publish refuses the ones that name
// another.
func fillTopics(req *sundialv1.PublishRequest) {
	if req.GetTopic() == "" {
		return
	}
	for _, m := range req.GetMessages() {
		if m != nil && m.GetTopic() == "" {
			m.Topic = req.GetTopic()
		}
	}
}

// textToPayload stores each valid message's plain-text payload as its
// payload bytes: brokers and consumers see payload only.
func textToPayload(req *sundialv1.PublishRequest) {
	for _, m := range req.GetMessages() {
		if m.GetText() != "" {
			m.Payload, m.Text = []byte(m.GetText()), ""
		}
	}
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
