package forward

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

// countingAdmin answers GetClusterInfo after delay with err (nil: an
// answer) and counts the calls that reached it.
type countingAdmin struct {
	sundialv1.UnimplementedAdminServer
	delay time.Duration
	err   error
	calls atomic.Int32
}

func (a *countingAdmin) GetClusterInfo(ctx context.Context, _ *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	a.calls.Add(1)
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if a.err != nil {
		return nil, a.err
	}
	return &sundialv1.ClusterInfo{RoutingVersion: 7}, nil
}

// downAddr is a loopback address nothing listens on.
func downAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func newTestForwarder(t *testing.T, timeout time.Duration, seeds ...string) *Forwarder {
	t.Helper()
	pool := routing.NewPool()
	t.Cleanup(pool.Close)
	return New(fixedTable{routing.NewTable(&sundialv1.RoutingTable{}, nil)}, pool, seeds, timeout, nil)
}

func onceAsk(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
	_, err := sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{}, opts...)
	return err
}

// A call Once forwards goes past a broker nobody listens at (the call
// never left the proxy) to one that answers, and reaches that one once.
func TestOnceSkipsUnreachableBrokers(t *testing.T) {
	live := &countingAdmin{}
	f := newTestForwarder(t, 5*time.Second, downAddr(t), serveAdmin(t, live))
	for i := range 4 {
		if err := f.Once(t.Context(), onceAsk); err != nil {
			t.Fatalf("call %d: Once = %v, want nil (the live broker answers)", i, err)
		}
	}
	if got := live.calls.Load(); got != 4 {
		t.Errorf("the live broker got %d calls from 4 Once calls, want 4", got)
	}
}

// The answer of the broker a call reached is the answer, even one that
// Any would retry elsewhere (Unavailable): the call may have taken effect.
func TestOnceKeepsTheAnswerOfTheBrokerReached(t *testing.T) {
	busy := &countingAdmin{err: status.Error(codes.Unavailable, "meta leader unknown")}
	f := newTestForwarder(t, 5*time.Second, downAddr(t), serveAdmin(t, busy))
	for i := range 3 {
		err := f.Once(t.Context(), onceAsk)
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "meta leader unknown") {
			t.Fatalf("call %d: Once = %v, want the broker's own Unavailable", i, err)
		}
	}
	if got := busy.calls.Load(); got != 3 {
		t.Errorf("the broker got %d calls from 3 Once calls, want 3 (none retried)", got)
	}
}

// An attempt of Long runs past the forward timeout; the search for a
// broker does not.
func TestLongAttemptOutlastsTheForwardTimeout(t *testing.T) {
	slow := &countingAdmin{delay: 600 * time.Millisecond}
	f := newTestForwarder(t, 100*time.Millisecond, serveAdmin(t, slow))
	retry := func(err error) bool { return apierr.Classify(err) == apierr.Retry }
	err := f.Long(t.Context(), retry, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		return err
	})
	if err != nil {
		t.Fatalf("Long(an answer after 600ms, forward timeout 100ms) = %v, want nil", err)
	}

	busy := &countingAdmin{err: status.Error(codes.Unavailable, "not yet")}
	f = newTestForwarder(t, 100*time.Millisecond, serveAdmin(t, busy))
	err = f.Long(t.Context(), retry, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		return err
	})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "no broker reachable (last error: not yet)") {
		t.Errorf("Long(a broker answering Unavailable) = %v, want Unavailable naming its last answer", err)
	}
	if busy.calls.Load() < 2 {
		t.Errorf("Long tried the broker answering Unavailable %d times, want it retried", busy.calls.Load())
	}
}
