package forward

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

// TestOrder: Any's round robin, with the addresses whose reads timed out
// lately moved to the end and ended entries forgotten.
func TestOrder(t *testing.T) {
	now := time.Unix(1000, 0)
	addrs := []string{"a", "b", "c"}
	tests := []struct {
		name  string
		start int
		slow  map[string]time.Time
		want  []string
		left  []string // slow entries kept
	}{
		{"none slow", 1, nil, []string{"b", "c", "a"}, nil},
		{"start wraps", 5, nil, []string{"c", "a", "b"}, nil},
		{"slow first moves last", 1, map[string]time.Time{"b": now.Add(time.Second)}, []string{"c", "a", "b"}, []string{"b"}},
		{"two slow keep their order", 0, map[string]time.Time{"a": now.Add(time.Second), "b": now.Add(time.Second)}, []string{"c", "a", "b"}, []string{"a", "b"}},
		{"ended entry forgotten", 1, map[string]time.Time{"b": now}, []string{"b", "c", "a"}, nil},
		{"slow address not among the brokers", 0, map[string]time.Time{"gone": now.Add(time.Second)}, []string{"a", "b", "c"}, []string{"gone"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slow := make(map[string]time.Time)
			for a, u := range tc.slow {
				slow[a] = u
			}
			if got := routing.RotateAvoiding(addrs, tc.start, slow, now); !slices.Equal(got, tc.want) {
				t.Errorf("RotateAvoiding(%v, %d, %v) = %v, want %v", addrs, tc.start, tc.slow, got, tc.want)
			}
			var left []string
			for a := range slow {
				left = append(left, a)
			}
			slices.Sort(left)
			if !slices.Equal(left, tc.left) {
				t.Errorf("slow entries after order = %v, want %v", left, tc.left)
			}
		})
	}
}

// hungAdmin answers GetClusterInfo only when it is not hung; a hung one
// holds the call until the caller gives up, as a stopped broker whose
// connection stays open does.
type hungAdmin struct {
	sundialv1.UnimplementedAdminServer
	hung bool
}

func (h hungAdmin) GetClusterInfo(ctx context.Context, _ *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	if h.hung {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &sundialv1.ClusterInfo{}, nil
}

func serveAdmin(t *testing.T, srv sundialv1.AdminServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	sundialv1.RegisterAdminServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestAnyWithHungBroker: against one hung broker and one that answers,
// every read forwarded by AnyRead answers; only the first read that starts
// at the hung broker times out there, since it is tried last afterwards,
// and writes (Any, one deadline per call) are sent to the live broker
// first too. Before reads had a per-try deadline, a read starting at the
// hung broker answered Unavailable at the forward timeout.
func TestAnyWithHungBroker(t *testing.T) {
	hung := serveAdmin(t, hungAdmin{hung: true})
	live := serveAdmin(t, hungAdmin{})
	pool := routing.NewPool()
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	// The first call starts at seeds[1] (the round robin begins at 1).
	f := New(fixedTable{routing.NewTable(&sundialv1.RoutingTable{}, nil)}, pool, []string{live, hung}, 3*time.Second, m)
	ask := func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		return err
	}
	for i := range 4 {
		if err := f.AnyRead(context.Background(), ask); err != nil {
			t.Fatalf("read %d: AnyRead = %v, want nil (the live broker answers)", i, err)
		}
	}
	if got := testutil.ToFloat64(m.tryTimeouts); got != 1 {
		t.Errorf("per-try timeouts after 4 reads = %v, want 1 (the hung broker tried last after the first)", got)
	}
	for i := range 4 {
		if err := f.Any(context.Background(), ask); err != nil {
			t.Fatalf("write %d: Any = %v, want nil (the hung broker is tried last)", i, err)
		}
	}
}
