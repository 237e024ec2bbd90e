package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// serve starts a real gRPC server on 127.0.0.1:0 with the given services and
// returns a Client dialled to it. Both end with the test.
func serve(t *testing.T, register func(*grpc.Server), opts ...Option) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	opts = append([]Option{WithBackoff(Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond})}, opts...)
	c, err := Dial(context.Background(), []string{lis.Addr().String()}, opts...)
	if err != nil {
		t.Fatalf("Dial(%s) = %v, want nil", lis.Addr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDialErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
	}{
		{"nil", nil},
		{"empty strings", []string{"", " , "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Dial(context.Background(), tc.addrs); !errors.Is(err, ErrNoAddrs) {
				t.Errorf("Dial(%q) = %v, want %v", tc.addrs, err, ErrNoAddrs)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, Multiplier: 2}
	for _, tc := range []struct {
		name     string
		attempt  int
		min, max time.Duration
	}{
		{"first", 0, 5 * time.Millisecond, 10 * time.Millisecond},
		{"third", 2, 20 * time.Millisecond, 40 * time.Millisecond},
		{"capped", 30, 40 * time.Millisecond, 80 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 100; i++ {
				if got := b.Delay(tc.attempt); got < tc.min || got > tc.max {
					t.Fatalf("Delay(%d) = %v, want in [%v, %v]", tc.attempt, got, tc.min, tc.max)
				}
			}
		})
	}
}
