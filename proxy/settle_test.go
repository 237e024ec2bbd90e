package proxy

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

// settleBroker is one replica of shard 1 as acks, nacks and extends see
// it: settled holds the receipts the shard settled, shared by both
// replicas (they apply the same log). The old leader settles a receipt at
// once, tells entered, and answers only when release closes or its call
// ends; the new leader answers NOT_FOUND for a receipt already settled,
// as a shard does for a copy acked (or moved) before.
type settleBroker struct {
	sundialv1.UnimplementedClusterServer
	brokerv1.UnimplementedShardServer
	old     bool
	table   func() *sundialv1.RoutingTable
	entered chan struct{}
	release chan struct{}

	mu       *sync.Mutex
	settled  map[string]bool
	retried  *int // calls the new leader got
	notFound *int // receipts the new leader answered NOT_FOUND
}

func (b *settleBroker) WatchRouting(_ *sundialv1.WatchRoutingRequest, st grpc.ServerStreamingServer[sundialv1.RoutingTable]) error {
	if err := st.Send(b.table()); err != nil {
		return err
	}
	<-st.Context().Done()
	return nil
}

func (b *settleBroker) settle(ctx context.Context, rs []string) ([]*sundialv1.ReceiptResult, error) {
	out := make([]*sundialv1.ReceiptResult, len(rs))
	b.mu.Lock()
	if !b.old {
		*b.retried++
	}
	for i, r := range rs {
		out[i] = &sundialv1.ReceiptResult{Receipt: r}
		if !b.old && b.settled[r] {
			*b.notFound++
			out[i].Error = status.New(codes.NotFound, "copy not found: acked, expired or moved on").Proto()
		}
		b.settled[r] = true
	}
	b.mu.Unlock()
	if b.old {
		b.entered <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return out, nil
}

func (b *settleBroker) Ack(ctx context.Context, req *brokerv1.ShardAckRequest) (*sundialv1.AckResponse, error) {
	res, err := b.settle(ctx, req.GetReceipts())
	return &sundialv1.AckResponse{Results: res}, err
}

func (b *settleBroker) Nack(ctx context.Context, req *brokerv1.ShardNackRequest) (*sundialv1.NackResponse, error) {
	res, err := b.settle(ctx, req.GetReceipts())
	return &sundialv1.NackResponse{Results: res}, err
}

func (b *settleBroker) Extend(ctx context.Context, req *brokerv1.ShardExtendRequest) (*sundialv1.ExtendResponse, error) {
	res, err := b.settle(ctx, req.GetReceipts())
	return &sundialv1.ExtendResponse{Results: res}, err
}

func serveSettle(t *testing.T, b *settleBroker) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	sundialv1.RegisterClusterServer(g, b)
	brokerv1.RegisterShardServer(g, b)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// Acks, nacks and extends carry no request id, so a try that took effect
// must not be cut and tried again: the retry would find the copy settled
// and answer NOT_FOUND for an operation that succeeded. Here the old
// leader settles the receipt and then stalls while the routing table moves
// the shard's leader to the other replica; the client must get the old
// leader's OK, and the new leader no second try.
func TestSettleIsNotRetriedWhenTheLeaderMoves(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, c sundialv1.ConsumerClient, r string) ([]*sundialv1.ReceiptResult, error)
	}{
		{"ack", func(ctx context.Context, c sundialv1.ConsumerClient, r string) ([]*sundialv1.ReceiptResult, error) {
			resp, err := c.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{r}})
			return resp.GetResults(), err
		}},
		{"nack", func(ctx context.Context, c sundialv1.ConsumerClient, r string) ([]*sundialv1.ReceiptResult, error) {
			resp, err := c.Nack(ctx, &sundialv1.NackRequest{Receipts: []string{r}, DelayMs: 10})
			return resp.GetResults(), err
		}},
		{"extend", func(ctx context.Context, c sundialv1.ConsumerClient, r string) ([]*sundialv1.ReceiptResult, error) {
			resp, err := c.Extend(ctx, &sundialv1.ExtendRequest{Receipts: []string{r}, ExtendMs: 1000})
			return resp.GetResults(), err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			settled := map[string]bool{}
			var retried, notFound int
			oldB := &settleBroker{old: true, entered: make(chan struct{}, 1), release: make(chan struct{}), mu: &mu, settled: settled, retried: &retried, notFound: &notFound}
			newB := &settleBroker{mu: &mu, settled: settled, retried: &retried, notFound: &notFound}
			oldAddr, newAddr := serveSettle(t, oldB), serveSettle(t, newB)
			table := func() *sundialv1.RoutingTable {
				return &sundialv1.RoutingTable{
					Version: 3,
					Nodes:   []*sundialv1.Node{{NodeId: 1, GrpcAddr: oldAddr}, {NodeId: 2, GrpcAddr: newAddr}},
					Shards:  []*sundialv1.Shard{{ShardId: 1, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}}}},
				}
			}
			oldB.table, newB.table = table, table

			cfg := DefaultConfig()
			cfg.AdminAddr = "" // no pprof listener: tests run side by side
			cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
			cfg.Brokers = []string{oldAddr}
			cfg.ForwardTimeout = time.Minute
			srv, err := New(cfg, zaptest.NewLogger(t), nil)
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			if err := srv.Start(t.Context()); err != nil {
				t.Fatalf("Start() = %v", err)
			}
			t.Cleanup(srv.Stop)
			waitFor(t, "proxy ready", srv.Ready)
			conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			r := receipt.Receipt{Message: receipt.NewMessageID(1, 5, 0), Group: "default", Attempt: 1}.String()
			type answer struct {
				res []*sundialv1.ReceiptResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := tc.call(t.Context(), sundialv1.NewConsumerClient(conn), r)
				done <- answer{res, err}
			}()
			<-oldB.entered // settled at the old leader, its answer in flight

			rt := proto.Clone(srv.watcher.Table().Raw()).(*sundialv1.RoutingTable)
			rt.Version++
			rt.Shards[0].LeaderNodeId = 2
			srv.watcher.Install(rt)
			// A cut try is retried at the new leader at once; give it the
			// chance before the old leader answers (the assertion does not
			// depend on how long this takes).
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				mu.Lock()
				n := retried
				mu.Unlock()
				if n > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			close(oldB.release)

			ans := <-done
			if ans.err != nil {
				t.Fatalf("%s = %v", tc.name, ans.err)
			}
			if len(ans.res) != 1 || ans.res[0].GetError() != nil {
				t.Fatalf("%s results = %v, want one OK: it took effect at the old leader", tc.name, ans.res)
			}
			mu.Lock()
			defer mu.Unlock()
			if retried != 0 || notFound != 0 {
				t.Errorf("new leader got %d tries (%d receipts answered NOT_FOUND), want none", retried, notFound)
			}
		})
	}
}

// shortAckBroker leads shard 1 and answers every ack with one result,
// whatever the number of receipts (a broken or mismatched broker).
type shortAckBroker struct {
	settleBroker
}

func (b *shortAckBroker) Ack(_ context.Context, req *brokerv1.ShardAckRequest) (*sundialv1.AckResponse, error) {
	return &sundialv1.AckResponse{Results: []*sundialv1.ReceiptResult{{Receipt: req.GetReceipts()[0]}}}, nil
}

// A broker answering the wrong number of ack results fails each receipt
// with Internal saying what happened, never Unknown.
func TestAckWithTheWrongNumberOfResultsIsInternal(t *testing.T) {
	b := &shortAckBroker{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	b.table = func() *sundialv1.RoutingTable {
		return &sundialv1.RoutingTable{
			Version: 3,
			Nodes:   []*sundialv1.Node{{NodeId: 1, GrpcAddr: addr}},
			Shards:  []*sundialv1.Shard{{ShardId: 1, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}}}},
		}
	}
	g := grpc.NewServer()
	sundialv1.RegisterClusterServer(g, b)
	brokerv1.RegisterShardServer(g, b)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	cfg := DefaultConfig()
	cfg.AdminAddr = "" // no pprof listener: tests run side by side
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Brokers = []string{addr}
	srv, err := New(cfg, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(srv.Stop)
	waitFor(t, "proxy ready", srv.Ready)
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	var rs []string
	for i := range 2 {
		rs = append(rs, receipt.Receipt{Message: receipt.NewMessageID(1, uint64(5+i), 0), Group: "default", Attempt: 1}.String())
	}
	resp, err := sundialv1.NewConsumerClient(conn).Ack(t.Context(), &sundialv1.AckRequest{Receipts: rs})
	if err != nil {
		t.Fatalf("Ack() = %v", err)
	}
	if len(resp.GetResults()) != 2 {
		t.Fatalf("Ack() results = %v, want 2", resp.GetResults())
	}
	for _, r := range resp.GetResults() {
		if got := codes.Code(r.GetError().GetCode()); got != codes.Internal || !strings.Contains(r.GetError().GetMessage(), "1 ack results for 2 receipts") {
			t.Errorf("Ack() result = %v, want Internal saying the shard answered 1 result for 2 receipts", r)
		}
	}
}
