package service

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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
