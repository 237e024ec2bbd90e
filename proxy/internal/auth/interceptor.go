package auth

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// Guard enforces authentication and the rule table on every call, signs
// receipts going out and verifies them coming in.
type Guard struct {
	authn *Authenticator
	store *Store
	log   *zap.Logger
	audit *prometheus.CounterVec
}

// NewGuard builds the interceptors' state; reg takes the audit counter.
func NewGuard(authn *Authenticator, store *Store, log *zap.Logger, reg prometheus.Registerer) *Guard {
	g := &Guard{authn: authn, store: store, log: log.Named("audit"), audit: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sundial_proxy_audit_events_total",
		Help: "Audited events by action (the gRPC method, or authenticate) and outcome (ok, denied, unauthenticated, error).",
	}, []string{"action", "outcome"})}
	reg.MustRegister(g.audit)
	return g
}

type principalKey struct{}

// PrincipalOf is the principal the guard found for ctx's call, nil when
// authentication is off.
func PrincipalOf(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// admit authenticates the call and checks rule against msg (nil for a
// stream before its first message).
func (g *Guard) admit(ctx context.Context, method string) (*Principal, Rule, error) {
	rule, ok := Rules[method]
	if !ok {
		g.record(nil, method, "", "denied")
		return nil, rule, status.Errorf(codes.PermissionDenied, "permission denied: %s has no rule", method)
	}
	if rule.Perm == Open {
		return nil, rule, nil
	}
	p, err := g.authn.Authenticate(ctx)
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			g.record(nil, "authenticate", method, "unauthenticated")
		}
		return nil, rule, err
	}
	return p, rule, nil
}

// check says whether p may make a call of rule with msg.
func (g *Guard) check(p *Principal, rule Rule, msg proto.Message) error {
	if p == nil || rule.Perm == Open || rule.Perm == Authenticated {
		return nil
	}
	snap := g.store.Snapshot()
	topics := []string{""}
	if rule.Topics != nil {
		topics = rule.Topics(msg)
	}
	for _, t := range topics {
		if !p.allows(snap, rule.Perm, t) {
			return denied(rule.Perm, t)
		}
	}
	return nil
}

// Unary is the unary server interceptor.
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, rule, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	msg, _ := req.(proto.Message)
	var signedOf map[string]string
	if rule.Receipts {
		var topics []string
		if topics, signedOf, err = g.unwrapReceipts(msg); err != nil {
			return nil, err
		}
		for _, t := range topics {
			if !p.allows(g.store.Snapshot(), rule.Perm, t) {
				g.record(p, info.FullMethod, t, "denied")
				return nil, denied(rule.Perm, t)
			}
		}
	} else if err := g.check(p, rule, msg); err != nil {
		g.record(p, info.FullMethod, topicOf(rule, msg), "denied")
		return nil, err
	}
	ctx = context.WithValue(ctx, principalKey{}, p)
	resp, err := handler(ctx, req)
	if auditedMethod(rule) {
		g.record(p, info.FullMethod, topicOf(rule, msg), outcome(err))
	}
	if err != nil {
		return resp, err
	}
	switch r := resp.(type) {
	case *sundialv1.ReceiveResponse:
		g.signDeliveries(r.GetDeliveries())
	case *sundialv1.ListTopicsResponse:
		snap := g.store.Snapshot()
		kept := r.Topics[:0]
		for _, t := range r.GetTopics() {
			if p.allows(snap, Any, t.GetName()) {
				kept = append(kept, t)
			}
		}
		r.Topics = kept
	}
	if signedOf != nil {
		resignResults(resp, signedOf)
	}
	return resp, nil
}

func topicOf(rule Rule, msg proto.Message) string {
	if rule.Topics == nil || msg == nil {
		return ""
	}
	if ts := rule.Topics(msg); len(ts) > 0 {
		return ts[0]
	}
	return ""
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return "error"
}

// record logs one audit line and counts it.
func (g *Guard) record(p *Principal, action, target, result string) {
	g.audit.WithLabelValues(action, result).Inc()
	principal := ""
	if p != nil {
		principal = p.Kind + ":" + p.Name
	}
	g.log.Info("audit", zap.String("principal", principal), zap.String("action", action), zap.String("target", target), zap.String("outcome", result))
}

// Stream is the stream server interceptor: it checks every message the
// client sends, signs the receipts of deliveries, verifies those of settle
// frames, and ends the stream with Unauthenticated once its token is
// revoked or expires.
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	p, rule, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if p == nil {
		return handler(srv, ss)
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(ss.Context(), principalKey{}, p))
	defer cancel(nil)
	gs := &guardedStream{ServerStream: ss, g: g, p: p, rule: rule, method: info.FullMethod, ctx: ctx, signed: map[string]string{}}
	done := make(chan error, 1)
	go func() { done <- handler(srv, gs) }()
	var expiry <-chan time.Time
	if !p.expiresAt.IsZero() {
		timer := time.NewTimer(time.Until(p.expiresAt))
		defer timer.Stop()
		expiry = timer.C
	}
	for {
		changed := g.store.Changed()
		select {
		case err := <-done:
			return err
		case <-changed:
		case <-expiry:
		}
		if err := g.authn.stillValid(p); err != nil {
			// The handler may still be blocked reading the client: the
			// stream ends when this returns; its later sends are refused.
			gs.close(err)
			cancel(err)
			g.record(p, "authenticate", info.FullMethod, "unauthenticated")
			return err
		}
	}
}

type guardedStream struct {
	grpc.ServerStream
	g      *Guard
	p      *Principal
	rule   Rule
	method string
	ctx    context.Context

	mu     sync.Mutex        // guards closed, topic, signed, and serialises SendMsg
	closed error             // set when the guard ended the stream
	topic  string            // a Subscribe stream's topic, from its start frame
	signed map[string]string // plain receipt → signed, of settle frames not answered yet
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) close(err error) {
	s.mu.Lock()
	s.closed = err
	s.mu.Unlock()
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	msg, _ := m.(proto.Message)
	if err := s.g.check(s.p, s.rule, msg); err != nil {
		s.g.record(s.p, s.method, topicOf(s.rule, msg), "denied")
		return err
	}
	req, ok := m.(*sundialv1.SubscribeRequest)
	if !ok {
		return nil
	}
	if st := req.GetStart(); st != nil {
		s.mu.Lock()
		s.topic = st.GetTopic()
		s.mu.Unlock()
		return nil
	}
	var receipts []string
	field := ""
	switch k := req.GetKind().(type) {
	case *sundialv1.SubscribeRequest_Ack:
		receipts, field = k.Ack.GetReceipts(), "ack"
	case *sundialv1.SubscribeRequest_Nack:
		receipts, field = k.Nack.GetReceipts(), "nack"
	case *sundialv1.SubscribeRequest_Extend:
		receipts, field = k.Extend.GetReceipts(), "extend"
	default:
		return nil
	}
	plain, topics, err := s.g.unwrap(field+".receipts", receipts)
	if err != nil {
		return err
	}
	snap := s.g.store.Snapshot()
	for _, t := range topics {
		if !s.p.allows(snap, Consume, t) {
			s.g.record(s.p, s.method, t, "denied")
			return denied(Consume, t)
		}
	}
	s.mu.Lock()
	for i := range receipts {
		s.signed[plain[i]] = receipts[i]
		receipts[i] = plain[i]
	}
	s.mu.Unlock()
	return nil
}

func (s *guardedStream) SendMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return s.closed
	}
	if resp, ok := m.(*sundialv1.SubscribeResponse); ok {
		switch k := resp.GetKind().(type) {
		case *sundialv1.SubscribeResponse_Delivery:
			s.g.signDeliveries([]*sundialv1.Delivery{k.Delivery})
		case *sundialv1.SubscribeResponse_Deliveries:
			s.g.signDeliveries(k.Deliveries.GetDeliveries())
		case *sundialv1.SubscribeResponse_AckResult:
			for _, r := range k.AckResult.GetResults() {
				if signed, ok := s.signed[r.GetReceipt()]; ok {
					delete(s.signed, r.GetReceipt())
					r.Receipt = signed
				}
			}
		}
	}
	return s.ServerStream.SendMsg(m)
}

// signDeliveries replaces each delivery's receipt with its signed form
// under the newest key; with no key yet they stay plain (and will be
// refused at ack: the cluster has no receipt key).
func (g *Guard) signDeliveries(ds []*sundialv1.Delivery) {
	snap := g.store.Snapshot()
	if snap == nil || len(snap.Keys) == 0 {
		return
	}
	k := snap.Keys[0]
	for _, d := range ds {
		if d.GetReceipt() == "" {
			continue
		}
		if s, err := receipt.Sign(d.GetReceipt(), d.GetTopic(), k.ID, k.Secret); err == nil {
			d.Receipt = s
		}
	}
}

// unwrap verifies signed receipts under the live keys and answers the
// plain receipts and their topics; any receipt that does not verify
// refuses the whole request (InvalidArgument naming it), before anything
// is applied.
func (g *Guard) unwrap(field string, signed []string) (plain, topics []string, err error) {
	snap := g.store.Snapshot()
	key := func(id uint32) []byte {
		if snap == nil {
			return nil
		}
		for _, k := range snap.Keys {
			if k.ID == id {
				return k.Secret
			}
		}
		return nil
	}
	seen := map[string]bool{}
	var bad []apierr.FieldViolation
	for i, s := range signed {
		p, t, err := receipt.Verify(s, key)
		if err != nil {
			bad = append(bad, apierr.FieldViolation{Field: fmt.Sprintf("%s[%d]", field, i), Description: "not a receipt this cluster signed (forged, altered, or signed with a key rotated out)"})
			continue
		}
		plain = append(plain, p)
		if !seen[t] {
			seen[t] = true
			topics = append(topics, t)
		}
	}
	if len(bad) > 0 {
		return nil, nil, apierr.InvalidArgument(bad...)
	}
	return plain, topics, nil
}

// receiptsOf points at the receipts field of an Ack, Nack or Extend.
func receiptsOf(msg proto.Message) *[]string {
	switch r := msg.(type) {
	case *sundialv1.AckRequest:
		return &r.Receipts
	case *sundialv1.NackRequest:
		return &r.Receipts
	case *sundialv1.ExtendRequest:
		return &r.Receipts
	}
	return nil
}

// unwrapReceipts replaces a unary settle request's signed receipts with
// the plain ones and answers their topics and the signed form of each
// plain one.
func (g *Guard) unwrapReceipts(msg proto.Message) ([]string, map[string]string, error) {
	rs := receiptsOf(msg)
	if rs == nil {
		return nil, nil, nil
	}
	plain, topics, err := g.unwrap("receipts", *rs)
	if err != nil {
		return nil, nil, err
	}
	signedOf := make(map[string]string, len(plain))
	for i, p := range plain {
		signedOf[p] = (*rs)[i]
	}
	*rs = plain
	return topics, signedOf, nil
}

// resignResults puts the client's signed receipts back into the results,
// which name the plain ones the broker saw.
func resignResults(resp any, signedOf map[string]string) {
	var results []*sundialv1.ReceiptResult
	switch r := resp.(type) {
	case *sundialv1.AckResponse:
		results = r.GetResults()
	case *sundialv1.NackResponse:
		results = r.GetResults()
	case *sundialv1.ExtendResponse:
		results = r.GetResults()
	}
	for _, r := range results {
		if s, ok := signedOf[r.GetReceipt()]; ok {
			r.Receipt = s
		}
	}
}
