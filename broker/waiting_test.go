package broker

import (
	"context"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/service"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// panickyPeer is a Peer service whose Identify panics.
type panickyPeer struct {
	brokerv1.UnimplementedPeerServer
}

func (panickyPeer) Identify(context.Context, *brokerv1.IdentifyRequest) (*brokerv1.IdentifyResponse, error) {
	panic("identify handler bug")
}

// TestWaitingServerIsBehindTheBoundary checks that the server of a broker
// waiting to be added answers a handler's panic Internal and keeps serving,
// as the full server does. Without the Boundary the panic ends the process.
func TestWaitingServerIsBehindTheBoundary(t *testing.T) {
	srv := waitingServer(service.NewBoundary(zaptest.NewLogger(t), prometheus.NewRegistry()), nil, panickyPeer{})
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
	peer := brokerv1.NewPeerClient(conn)
	for i := range 2 {
		if _, err := peer.Identify(t.Context(), &brokerv1.IdentifyRequest{}); status.Code(err) != codes.Internal {
			t.Errorf("Identify #%d = %v, want code Internal", i+1, err)
		}
	}
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health Check = %v, %v; want NOT_SERVING", resp.GetStatus(), err)
	}
}
