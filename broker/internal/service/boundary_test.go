package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/lni/dragonboat/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/proposer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
)

// faultyHealth answers each Check by the service name it is asked about:
// "panic" panics, "plain" fails with an error that carries no code,
// "unknown" with a status of code Unknown; Watch always panics.
type faultyHealth struct {
	healthpb.UnimplementedHealthServer
}

func (faultyHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "panic":
		var m map[string]int
		// SA5000 is the point: a nil-map write, a real runtime panic. The
		// two directives are standalone staticcheck's and golangci-lint's.
		//lint:ignore SA5000 a real runtime panic is what the test needs
		m["boom"]++ //nolint:staticcheck // SA5000 is the point
	case "plain":
		return nil, errors.New("pebble: something broke")
	case "unknown":
		return nil, status.Error(codes.Unknown, "no code given")
	case "canceled":
		return nil, context.Canceled
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (faultyHealth) Watch(*healthpb.HealthCheckRequest, healthpb.Health_WatchServer) error {
	panic("watch handler bug")
}

func TestBoundaryRecoversPanicsAndTranslatesErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := NewBoundary(zaptest.NewLogger(t), reg)
	srv := grpc.NewServer(b.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, faultyHealth{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v, want nil after Stop", err)
		}
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := t.Context()

	tests := []struct {
		service string
		want    codes.Code
	}{
		{"panic", codes.Internal},
		{"plain", codes.Internal},
		{"unknown", codes.Internal},
		{"canceled", codes.Canceled},
		{"", codes.OK},
		{"panic", codes.Internal}, // the server still serves after a panic
	}
	for _, tt := range tests {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: tt.service})
		if got := status.Code(err); got != tt.want {
			t.Errorf("Check(%q) code = %v (%v), want %v", tt.service, got, err, tt.want)
		}
	}
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Internal {
		t.Errorf("Watch() Recv error = %v, want code Internal", err)
	}
	if got := counterValue(t, reg, "sundial_broker_grpc_panics_total"); got != 3 {
		t.Errorf("sundial_broker_grpc_panics_total = %v, want 3", got)
	}
}

// counterValue reads a counter without labels from reg, 0 if absent.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// domainHealth fails each Check with the error named by the service asked
// about, as a handler returns its domain error.
type domainHealth struct {
	healthpb.UnimplementedHealthServer
	errs map[string]error
}

func (d domainHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, d.errs[req.GetService()]
}

func (d domainHealth) Watch(req *healthpb.HealthCheckRequest, _ healthpb.Health_WatchServer) error {
	return d.errs[req.GetService()]
}

// TestBoundaryTranslatesDomainErrors checks, over gRPC on loopback, the
// code, message and details a client sees for each kind of domain error a
// handler returns, on a unary call and on a stream.
func TestBoundaryTranslatesDomainErrors(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		code  codes.Code
		msg   string // "" leaves the message unchecked
		check func(error) bool
	}{
		{name: "field violations", err: apierr.InvalidArgument(apierr.FieldViolation{Field: "topic", Description: "required"}), code: codes.InvalidArgument,
			check: func(err error) bool { v := apierr.Violations(err); return len(v) == 1 && v[0].Field == "topic" }},
		{name: "wrapped status", err: fmt.Errorf("forward: %w", status.Error(codes.ResourceExhausted, "slow down")), code: codes.ResourceExhausted, msg: "slow down"},
		{name: "topic not found", err: fmt.Errorf("get: %w", &meta.NotFoundError{Topic: "t"}), code: codes.NotFound, msg: `topic "t" does not exist`},
		{name: "exists", err: &meta.ExistsError{Topic: "t"}, code: codes.AlreadyExists, msg: `topic "t" already exists`},
		{name: "being deleted", err: &meta.BeingDeletedError{Topic: "t"}, code: codes.FailedPrecondition},
		{name: "busy", err: &meta.BusyError{Topic: "t"}, code: codes.Aborted},
		{name: "handing over", err: &meta.HandingOverError{Topic: "t"}, code: codes.FailedPrecondition},
		{name: "over a cap", err: fmt.Errorf("create: %w", &meta.OverLimitError{Topic: "t", Group: "g"}), code: codes.ResourceExhausted,
			check: func(err error) bool { return apierr.Classify(err) == apierr.Permanent }},
		{name: "not shard leader", err: fmt.Errorf("transfer: %w", &host.NotShardLeaderError{Shard: 3, Leader: 2, LeaderAddr: "127.0.0.1:9"}), code: codes.FailedPrecondition,
			check: func(err error) bool {
				nl, ok := apierr.AsNotLeader(err)
				return ok && nl.GetShardId() == 3 && nl.GetLeaderAddr() == "127.0.0.1:9"
			}},
		{name: "no replica on node", err: fmt.Errorf("transfer: %w", host.ErrNoReplicaOnNode), code: codes.FailedPrecondition},
		{name: "node id taken", err: fmt.Errorf("%w: node 4", host.ErrNodeIDTaken), code: codes.AlreadyExists},
		{name: "other cluster", err: fmt.Errorf("%w: c1", host.ErrOtherCluster), code: codes.FailedPrecondition,
			check: func(err error) bool { v := apierr.Violations(err); return len(v) == 1 && v[0].Field == "cluster_id" }},
		{name: "not bootstrapped", err: host.ErrNotBootstrapped, code: codes.Unavailable},
		{name: "deadline", err: fmt.Errorf("propose: %w", context.DeadlineExceeded), code: codes.DeadlineExceeded},
		{name: "raft round trip too short", err: dragonboat.ErrTimeoutTooSmall, code: codes.DeadlineExceeded},
		{name: "raft timeout", err: dragonboat.ErrTimeout, code: codes.Unavailable},
		{name: "shard closed", err: dragonboat.ErrShardClosed, code: codes.Unavailable},
		{name: "proposer closed", err: proposer.ErrClosed, code: codes.Unavailable},
		{name: "unknown status", err: status.Error(codes.Unknown, "no code given"), code: codes.Internal, msg: "no code given"},
		{name: "anything else", err: errors.New("pebble: broke"), code: codes.Internal, msg: "pebble: broke"},
	}
	errs := make(map[string]error, len(tests))
	for _, tt := range tests {
		errs[tt.name] = tt.err
	}
	b := NewBoundary(zaptest.NewLogger(t), prometheus.NewRegistry())
	srv := grpc.NewServer(b.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, domainHealth{errs: errs})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, unaryErr := client.Check(t.Context(), &healthpb.HealthCheckRequest{Service: tt.name})
			w, err := client.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: tt.name})
			if err != nil {
				t.Fatal(err)
			}
			_, streamErr := w.Recv()
			for call, err := range map[string]error{"Check": unaryErr, "Watch": streamErr} {
				st := status.Convert(err)
				if st.Code() != tt.code || (tt.msg != "" && st.Message() != tt.msg) {
					t.Errorf("%s: %v %q, want %v %q", call, st.Code(), st.Message(), tt.code, tt.msg)
				}
				if tt.check != nil && !tt.check(err) {
					t.Errorf("%s: details of %v are not the ones expected", call, st.Proto())
				}
			}
		})
	}
}
