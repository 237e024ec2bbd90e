package proxy

import (
	"context"
	"errors"
	"time"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// toStatus is the proxy's one error boundary: every error a handler
// returns passes through it, so nothing reaches a client as Unknown.
// Context errors become Canceled or DeadlineExceeded; statuses (our own
// and the brokers', with their details) pass through with their code,
// except Unknown, which becomes Internal; anything else becomes Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		if st.Code() != codes.Unknown {
			return st.Err()
		}
		return status.Error(codes.Internal, st.Message())
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// statusProto is toStatus for a per-item result.
func statusProto(err error) *statuspb.Status {
	return status.Convert(toStatus(err)).Proto()
}

func (s *Server) unaryBoundary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	began := time.Now()
	resp, err := handler(ctx, req)
	err = toStatus(err)
	s.metrics.observe(info.FullMethod, err, time.Since(began))
	return resp, err
}

func (s *Server) streamBoundary(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	began := time.Now()
	err := toStatus(handler(srv, ss))
	s.metrics.observe(info.FullMethod, err, time.Since(began))
	return err
}
