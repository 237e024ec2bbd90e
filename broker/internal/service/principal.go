package service

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// Gate is the broker's check of who calls. With TLS on, the listener's
// handshake already takes only clients with a certificate of the cluster
// CA; the gate then lets only brokers (a certificate whose principal,
// tlsfiles.PrincipalOf, is of kind broker) call the peer and membership
// APIs: every method of the Peer service (an operator's admin
// certificate may call AddToCluster too, which shardctl add-node does)
// and Cluster.JoinCluster. Any other caller is answered PermissionDenied
// before the handler runs, counted in sundial_broker_refused_total
// {reason="not_broker"} and logged. With TLS off the gate checks nothing:
// a plaintext broker has no verified identity to go by (it serves on
// loopback, or with --insecure on a network the operator trusts).
//
// The gate also counts and logs the joins JoinCluster refuses for their
// token (Refuse). It is safe for concurrent use; a nil *Gate checks and
// counts nothing.
type Gate struct {
	tlsOn   bool
	log     *zap.Logger
	refused *prometheus.CounterVec
}

// Refusal reasons of sundial_broker_refused_total besides the join-token
// ones (meta.DeniedNoToken and the others).
const refusedNotBroker = "not_broker"

// NewGate registers the gate's counter on reg; tlsOn says the gRPC
// listener serves TLS with client certificates.
func NewGate(tlsOn bool, log *zap.Logger, reg prometheus.Registerer) *Gate {
	g := &Gate{
		tlsOn: tlsOn,
		log:   log.Named("gate"),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "refused_total",
			Help: "Calls refused for who made them: peer or membership calls from a certificate that is not a broker's (not_broker), joins without a valid join token (no_token, bad_token, expired_token, spent_token).",
		}, []string{"reason"}),
	}
	reg.MustRegister(g.refused)
	return g
}

// ServerOptions are the gate's interceptors, to pass to grpc.NewServer
// after the Boundary's.
func (g *Gate) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

func (g *Gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := g.admit(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *Gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := g.admit(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// admit is nil when the caller of method may call it.
func (g *Gate) admit(ctx context.Context, method string) error {
	if g == nil || !g.tlsOn {
		return nil
	}
	kinds := callersOf(method)
	if kinds == nil {
		return nil
	}
	p := Caller(ctx)
	for _, k := range kinds {
		if p.Kind == k {
			return nil
		}
	}
	g.Refuse(ctx, refusedNotBroker, zap.String("method", method))
	return status.Errorf(codes.PermissionDenied, "%s may be called only with a broker's certificate (URI SAN %s); this one's principal is %s",
		method, tlsfiles.PrincipalURI(tlsfiles.KindBroker, "<node-id>"), p)
}

// callersOf names the principal kinds that may call method; nil: any
// client of the cluster CA.
func callersOf(method string) []string {
	switch {
	case method == "/sundial.broker.v1.Peer/AddToCluster":
		return []string{tlsfiles.KindBroker, tlsfiles.KindAdmin}
	case strings.HasPrefix(method, "/sundial.broker.v1.Peer/"), method == "/sundial.v1.Cluster/JoinCluster":
		return []string{tlsfiles.KindBroker}
	}
	return nil
}

// Caller is the principal of the verified client certificate of the call
// in ctx; the zero Principal without TLS or without a certificate.
func Caller(ctx context.Context) tlsfiles.Principal {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tlsfiles.Principal{}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return tlsfiles.Principal{}
	}
	return tlsfiles.PrincipalOf(info.State.VerifiedChains[0][0])
}

// Refuse counts a refusal for reason and logs it, one line, with the
// caller's address and principal and fields (never a secret).
func (g *Gate) Refuse(ctx context.Context, reason string, fields ...zap.Field) {
	if g == nil {
		return
	}
	g.refused.WithLabelValues(reason).Inc()
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	g.log.Warn("call refused", append([]zap.Field{zap.String("reason", reason), zap.String("peer_addr", addr), zap.Stringer("principal", Caller(ctx))}, fields...)...)
}
