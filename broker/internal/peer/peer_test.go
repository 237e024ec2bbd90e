package peer

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestConnsShareOneConnectionPerAddressUntilClose(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	c := New(nil)
	addr := lis.Addr().String()
	first, err := c.Conn(addr)
	if err != nil {
		t.Fatalf("Conn(%s) = %v, want a connection", addr, err)
	}
	second, err := c.Conn(addr)
	if err != nil || second != first {
		t.Fatalf("Conn(%s) again = %p, %v, want the first connection %p", addr, second, err, first)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(first).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check over the cached connection = %v, want an answer", err)
	}
	c.Close()
	if _, err := c.Conn(addr); !errors.Is(err, ErrClosed) {
		t.Fatalf("Conn after Close = %v, want ErrClosed", err)
	}
	if _, err := healthpb.NewHealthClient(first).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("Check over a closed connection answered, want an error")
	}
	c.Close() // a second Close is harmless
}
