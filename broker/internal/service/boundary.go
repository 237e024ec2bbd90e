package service

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Boundary is the broker's gRPC boundary: interceptors that apply the one
// error translator (StatusOf) to every handler's error and turn a
// handler's panic into an Internal error, counted and logged with its
// stack, instead of a crashed broker. It is safe for concurrent use.
type Boundary struct {
	log    *zap.Logger
	panics prometheus.Counter
}

// NewBoundary registers the boundary's counter on reg.
func NewBoundary(log *zap.Logger, reg prometheus.Registerer) *Boundary {
	b := &Boundary{
		log: log,
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "grpc_panics_total",
			Help: "gRPC handlers that panicked; each call answered Internal and the broker kept serving.",
		}),
	}
	reg.MustRegister(b.panics)
	return b
}

// ServerOptions are the interceptors to pass to grpc.NewServer.
func (b *Boundary) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(b.unary), grpc.ChainStreamInterceptor(b.stream)}
}

func (b *Boundary) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, b.recovered(info.FullMethod, r)
		}
	}()
	resp, err = handler(ctx, req)
	return resp, StatusOf(err).Err()
}

func (b *Boundary) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = b.recovered(info.FullMethod, r)
		}
	}()
	return StatusOf(handler(srv, ss)).Err()
}

// recovered counts and logs a handler's panic and answers Internal.
func (b *Boundary) recovered(method string, r any) error {
	b.panics.Inc()
	b.log.Error("grpc handler panicked", zap.String("method", method), zap.String("panic", fmt.Sprint(r)), zap.ByteString("stack", debug.Stack()))
	return status.Error(codes.Internal, "internal error: the broker handler failed (logged with its stack)")
}
