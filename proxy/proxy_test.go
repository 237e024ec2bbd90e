package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/frame"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proxy/internal/batch"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeBroker serves a fixed routing table and a toy Shard service. Node 1
// leads every shard; node 2 answers NotLeader pointing at node 1.
type fakeBroker struct {
	sundialv1.UnimplementedClusterServer
	brokerv1.UnimplementedShardServer
	leader     bool
	leaderAddr string
	table      func() *sundialv1.RoutingTable
	admin      sundialv1.AdminServer // optional
	auth       *fakeAuth             // optional: the AuthSync service
	queue      *fakeQueue            // optional: queue-semantics Shard calls
	backups    *fakeBackups          // optional: the Backups service
	// refuseBelow, if set, refuses publishes routed with an older routing
	// version as misplaced, calling onRefuse(refuseBelow) first; chase
	// refuses every publish, as routed one version too old.
	refuseBelow uint64
	chase       bool
	onRefuse    func(version uint64)
	// progress, if set, sends progress frames when a watch asks for them,
	// as brokers do; frozen, while set, has watch streams send nothing (a
	// SIGSTOPped broker, its connection open), though health answers.
	progress bool
	frozen   atomic.Bool

	mu           sync.Mutex
	subscribeErr error          // optional: every Subscribe fails with it
	published    map[uint64]int // shard → messages
	requestIDs   []string       // of the publishes stored
	acked        []string
	subscribes   int
	frameAsks    []int32 // max_deliveries_per_frame of each ShardStart
}

func (b *fakeBroker) WatchRouting(req *sundialv1.WatchRoutingRequest, st grpc.ServerStreamingServer[sundialv1.RoutingTable]) error {
	interval := time.Duration(req.GetProgressIntervalMs()) * time.Millisecond
	if !b.progress || interval <= 0 {
		if err := st.Send(b.table()); err != nil {
			return err
		}
		<-st.Context().Done()
		return nil
	}
	var sent *sundialv1.RoutingTable
	for {
		if !b.frozen.Load() {
			rt := &sundialv1.RoutingTable{Version: sent.GetVersion(), ProgressOnly: true}
			if sent == nil {
				rt = b.table()
				sent = rt
			}
			rt.ProgressIntervalMs = interval.Milliseconds()
			if err := st.Send(rt); err != nil {
				return err
			}
		}
		select {
		case <-time.After(interval):
		case <-st.Context().Done():
			return nil
		}
	}
}

func (b *fakeBroker) Publish(_ context.Context, req *brokerv1.ShardPublishRequest) (*sundialv1.PublishResponse, error) {
	if !b.leader {
		return nil, apierr.NotLeader(req.GetShardId(), 1, b.leaderAddr)
	}
	if len(req.GetMessages()) == 0 {
		// A claim of a request id on its home shard: nothing to store.
		return &sundialv1.PublishResponse{RequestId: req.GetRequestId()}, nil
	}
	if v := req.GetRoutingVersion(); v < b.refuseBelow || b.chase {
		want := max(b.refuseBelow, v+1)
		b.onRefuse(want)
		m := req.GetMessages()[0]
		return nil, apierr.Misplaced(req.GetShardId(), want, m.GetMessage().GetTopic(), m.GetPartition())
	}
	b.mu.Lock()
	b.published[req.GetShardId()] += len(req.GetMessages())
	b.requestIDs = append(b.requestIDs, req.GetRequestId())
	b.mu.Unlock()
	out := &sundialv1.PublishResponse{RequestId: req.GetRequestId()}
	for i, m := range req.GetMessages() {
		out.Results = append(out.Results, &sundialv1.PublishResult{MessageId: fmt.Sprintf("%d:%s", req.GetShardId(), m.GetMessage().GetPayload()), DueAtUnixMs: int64(i)})
	}
	return out, nil
}

func (b *fakeBroker) Subscribe(st grpc.BidiStreamingServer[brokerv1.ShardSubscribeRequest, sundialv1.SubscribeResponse]) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if !b.leader {
		return apierr.NotLeader(start.GetShardId(), 1, b.leaderAddr)
	}
	b.mu.Lock()
	b.subscribes++
	b.frameAsks = append(b.frameAsks, start.GetMaxDeliveriesPerFrame())
	failWith := b.subscribeErr
	b.mu.Unlock()
	if failWith != nil {
		return failWith
	}
	credit := int64(start.GetCredit())
	n := 0
	// As a shard does, what is ready at once goes out in frames as large
	// as the proxy asked for.
	send := func() error {
		var ds []*sundialv1.Delivery
		for ; credit > 0; credit-- {
			r := receipt.Receipt{Message: receipt.NewMessageID(start.GetShardId(), uint64(n+1), 0), Group: start.GetGroup(), Attempt: 1}
			n++
			ds = append(ds, &sundialv1.Delivery{
				MessageId: fmt.Sprintf("%d-%d", start.GetShardId(), n), Receipt: r.String(), Topic: start.GetTopic(), Group: start.GetGroup(),
			})
		}
		for _, f := range frame.Pack(ds, int(start.GetMaxDeliveriesPerFrame())) {
			if err := st.Send(f); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send(); err != nil {
		return err
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		credit += int64(req.GetCredit().GetN())
		if err := send(); err != nil {
			return err
		}
	}
}

func (b *fakeBroker) Ack(_ context.Context, req *brokerv1.ShardAckRequest) (*sundialv1.AckResponse, error) {
	if !b.leader {
		return nil, apierr.NotLeader(req.GetShardId(), 1, b.leaderAddr)
	}
	out := &sundialv1.AckResponse{}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range req.GetReceipts() {
		b.acked = append(b.acked, r)
		out.Results = append(out.Results, &sundialv1.ReceiptResult{Receipt: r})
	}
	return out, nil
}

// serve runs b on a loopback port with the server options opts and
// answers its address.
func serve(t testing.TB, b *fakeBroker, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	sundialv1.RegisterClusterServer(g, b)
	brokerv1.RegisterShardServer(g, b)
	healthpb.RegisterHealthServer(g, health.NewServer()) // SERVING, as a broker whose shards know their leaders
	if b.admin != nil {
		sundialv1.RegisterAdminServer(g, b.admin)
	}
	if b.auth != nil {
		brokerv1.RegisterAuthSyncServer(g, b.auth)
	}
	if b.backups != nil {
		sundialv1.RegisterBackupsServer(g, b.backups)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// startCluster runs a leader (node 1) and a follower (node 2, listed
// first as every shard's leader hint, so calls are redirected) and a proxy
// seeded with the follower.
func startCluster(t testing.TB) (*Server, *fakeBroker, *grpc.ClientConn) {
	t.Helper()
	return startClusterWith(t, nil, nil)
}

// startClusterWith is startCluster with the proxy's metrics in reg (nil: a
// private registry) and its config changed by mod (nil: the defaults).
func startClusterWith(t testing.TB, reg prometheus.Registerer, mod func(*Config)) (*Server, *fakeBroker, *grpc.ClientConn) {
	t.Helper()
	adm := &fakeAdmin{deletes: new(atomic.Int32)}
	fa := newFakeAuth()
	bk := &fakeBackups{}
	leader := &fakeBroker{leader: true, published: map[uint64]int{}, admin: adm, queue: &fakeQueue{}, auth: fa, backups: bk}
	follower := &fakeBroker{published: map[uint64]int{}, admin: adm, auth: fa, backups: bk}
	leaderAddr := serve(t, leader)
	followerAddr := serve(t, follower)
	follower.leaderAddr = leaderAddr
	table := func() *sundialv1.RoutingTable {
		rt := &sundialv1.RoutingTable{
			Version: 3,
			Nodes:   []*sundialv1.Node{{NodeId: 1, GrpcAddr: leaderAddr}, {NodeId: 2, GrpcAddr: followerAddr}},
			Topics:  []*sundialv1.TopicRoute{{Name: "wide", Partitions: 8, Groups: []string{"billing", "default"}}},
		}
		for id := uint64(1); id <= 4; id++ {
			rt.Shards = append(rt.Shards, &sundialv1.Shard{ShardId: id, LeaderNodeId: 2, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}}})
		}
		return rt
	}
	leader.table, follower.table = table, table

	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Brokers = []string{followerAddr}
	cfg.ForwardTimeout = 3 * time.Second
	cfg.AdminAddr = "127.0.0.1:0"
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg, zaptest.NewLogger(t), reg)
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
	return srv, leader, conn
}

func TestPublishSplitsAndMerges(t *testing.T) {
	_, leader, conn := startCluster(t)
	// 4 × batch.MinPartMessages unkeyed messages: four parts.
	const n = 4 * batch.MinPartMessages
	req := &sundialv1.PublishRequest{RequestId: "r1"}
	for i := range n {
		req.Messages = append(req.Messages, &sundialv1.Message{Topic: "wide", Payload: fmt.Appendf(nil, "m%d", i)})
	}
	resp, err := sundialv1.NewProducerClient(conn).Publish(t.Context(), req)
	if err != nil {
		t.Fatalf("Publish() = %v", err)
	}
	if len(resp.GetResults()) != n {
		t.Fatalf("Publish() gave %d results, want %d", len(resp.GetResults()), n)
	}
	for i, r := range resp.GetResults() {
		var shard uint64
		var payload string
		if _, err := fmt.Sscanf(r.GetMessageId(), "%d:%s", &shard, &payload); err != nil || payload != fmt.Sprintf("m%d", i) {
			t.Errorf("result %d = %v, want the id of m%d", i, r, i)
		}
	}
	leader.mu.Lock()
	shards := len(leader.published)
	leader.mu.Unlock()
	if shards < 2 {
		t.Errorf("%d messages over 8 partitions reached %d shards, want at least 2", n, shards)
	}
}

func TestPublishInvalid(t *testing.T) {
	_, _, conn := startCluster(t)
	_, err := sundialv1.NewProducerClient(conn).Publish(t.Context(), &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{Topic: "bad topic"}}})
	if status.Code(err) != codes.InvalidArgument || len(apierr.Violations(err)) != 1 {
		t.Fatalf("Publish(bad topic) = %v, want InvalidArgument with one violation", err)
	}
}

func TestSubscribeAndAck(t *testing.T) {
	_, leader, conn := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide", MaxInFlight: 10}}}); err != nil {
		t.Fatal(err)
	}
	var receipts []string
	for len(receipts) < 10 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("Recv() after %d deliveries = %v", len(receipts), err)
		}
		d := resp.GetDelivery()
		if d.GetGroup() != "default" {
			t.Errorf("delivery group = %q, want default", d.GetGroup())
		}
		receipts = append(receipts, d.GetReceipt())
	}
	// No more than granted: nothing else may arrive until credit is given.
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Ack{Ack: &sundialv1.AckRequest{RequestId: "a1", Receipts: append(receipts, "junk")}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ar := resp.GetAckResult()
	if ar == nil {
		t.Fatalf("Recv() = %v, want an AckResult (a delivery beyond the credit granted?)", resp)
	}
	if ar.GetRequestId() != "a1" || len(ar.GetResults()) != 11 {
		t.Fatalf("AckResult = %v, want request a1 with 11 results", ar)
	}
	for i, r := range ar.GetResults()[:10] {
		if r.GetError() != nil || r.GetReceipt() != receipts[i] {
			t.Errorf("ack result %d = %v, want success for %s", i, r, receipts[i])
		}
	}
	if c := codes.Code(ar.GetResults()[10].GetError().GetCode()); c != codes.InvalidArgument {
		t.Errorf("ack result for junk code = %v, want InvalidArgument", c)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Credit{Credit: &sundialv1.Credit{N: 3}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		resp, err := st.Recv()
		if err != nil || resp.GetDelivery() == nil {
			t.Fatalf("Recv() %d after credit = %v, %v, want a delivery", i, resp, err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv() after CloseSend = %v, want EOF", err)
	}
	leader.mu.Lock()
	acked := len(leader.acked)
	leader.mu.Unlock()
	if acked != 10 {
		t.Errorf("leader saw %d acks, want 10", acked)
	}
}

// A client that asks for frames of up to 4 gets the shards' batches
// repacked to that size, each delivery once and exactly its credit; the
// proxy asks every shard for batches.
func TestSubscribeRelaysBatchedFrames(t *testing.T) {
	_, leader, conn := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide", MaxInFlight: 40, MaxDeliveriesPerFrame: 4}}}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var frames []int
	recv := func(n int) {
		t.Helper()
		for len(seen) < n {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("Recv() after %d deliveries = %v", len(seen), err)
			}
			ds := frame.Deliveries(resp)
			if len(ds) == 0 || len(ds) > 4 {
				t.Fatalf("Recv() = %v, want 1 to 4 deliveries", resp)
			}
			frames = append(frames, len(ds))
			for _, d := range ds {
				if seen[d.GetMessageId()] {
					t.Fatalf("delivery %s relayed twice", d.GetMessageId())
				}
				seen[d.GetMessageId()] = true
			}
		}
		if len(seen) != n {
			t.Fatalf("%d deliveries, want exactly the %d credited", len(seen), n)
		}
	}
	recv(40)
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Credit{Credit: &sundialv1.Credit{N: 12}}}); err != nil {
		t.Fatal(err)
	}
	recv(52)
	// Nothing beyond the credit: the next frame answers this ack.
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Ack{Ack: &sundialv1.AckRequest{RequestId: "a1", Receipts: []string{"junk"}}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || resp.GetAckResult() == nil {
		t.Fatalf("Recv() = %v, %v, want the AckResult (a delivery beyond the credit?)", resp, err)
	}
	if !slices.ContainsFunc(frames, func(n int) bool { return n > 1 }) {
		t.Errorf("frames %v: want several deliveries per frame", frames)
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	for _, ask := range leader.frameAsks {
		if ask <= 1 {
			t.Errorf("shard streams asked for frames of %v, want every one batched", leader.frameAsks)
			break
		}
	}
}

func TestSubscribeFirstFrameMustBeStart(t *testing.T) {
	_, _, conn := startCluster(t)
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Credit{Credit: &sundialv1.Credit{N: 1}}})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Recv() = %v, want InvalidArgument", err)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	srv, _, _ := startCluster(t)
	for _, path := range []string{"/livez", "/readyz", "/healthz", "/metrics"} {
		resp, err := http.Get("http://" + srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, resp.StatusCode)
		}
	}
}

// TestPublishRetryIsSplitAlike: a request retried with its id reaches the
// same shards with the same messages, whatever the proxy handled in
// between, so each broker can answer its part from its dedup record; a
// request without an id reaches the brokers without one.
func TestPublishRetryIsSplitAlike(t *testing.T) {
	_, leader, conn := startCluster(t)
	producer := sundialv1.NewProducerClient(conn)
	req := func(rid string, n int) *sundialv1.PublishRequest {
		r := &sundialv1.PublishRequest{RequestId: rid}
		for i := range n {
			r.Messages = append(r.Messages, &sundialv1.Message{Topic: "wide", Payload: fmt.Appendf(nil, "m%d", i)})
		}
		return r
	}
	ids := func(r *sundialv1.PublishRequest) []string {
		t.Helper()
		resp, err := producer.Publish(t.Context(), r)
		if err != nil {
			t.Fatalf("Publish(%s) = %v", r.GetRequestId(), err)
		}
		var out []string
		for _, res := range resp.GetResults() {
			out = append(out, res.GetMessageId()) // "<shard>:<payload>"
		}
		return out
	}
	first := ids(req("r1", 13))
	ids(req("r2", 3))
	ids(req("", 5))
	if again := ids(req("r1", 13)); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Errorf("retry of r1 answered %v, want %v", again, first)
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	for _, rid := range leader.requestIDs {
		if rid == "" {
			continue
		}
		if r, _, ok := strings.Cut(rid, "/"); !ok || (r != "r1" && r != "r2") {
			t.Errorf("broker saw request id %q, want r1/<shard> or r2/<shard> or none", rid)
		}
	}
}

// A broker refusing a part as misplaced (its routing version is newer) makes
// the proxy wait for that table and route the messages again, under a
// request id of their own; nothing is retried at other replicas meanwhile.
func TestPublishReroutesMisplacedMessages(t *testing.T) {
	srv, leader, conn := startCluster(t)
	leader.refuseBelow = 4
	leader.onRefuse = installVersion(srv)
	req := &sundialv1.PublishRequest{RequestId: "r-move"}
	for i := range 16 {
		req.Messages = append(req.Messages, &sundialv1.Message{Topic: "wide", Payload: fmt.Appendf(nil, "m%d", i)})
	}
	resp, err := sundialv1.NewProducerClient(conn).Publish(t.Context(), req)
	if err != nil {
		t.Fatalf("Publish() = %v", err)
	}
	for i, r := range resp.GetResults() {
		if r.GetError() != nil {
			t.Fatalf("Publish() result %d = %v, want stored after re-routing", i, r.GetError())
		}
	}
	leader.mu.Lock()
	defer leader.mu.Unlock()
	total := 0
	for _, n := range leader.published {
		total += n
	}
	if total != 16 {
		t.Fatalf("broker stored %d messages, want 16", total)
	}
	for _, id := range leader.requestIDs {
		if !strings.HasPrefix(id, "r-move/reroute-1/") {
			t.Errorf("re-routed part request id = %q, want prefix r-move/reroute-1/", id)
		}
	}
}

// TestSubscribeEndsOnPermanentBrokerError: a shard stream refused with an
// error apierr.Classify calls Permanent (here ResourceExhausted without
// RetryInfo) ends the subscription with it instead of reopening forever.
func TestSubscribeEndsOnPermanentBrokerError(t *testing.T) {
	_, leader, conn := startCluster(t)
	leader.mu.Lock()
	leader.subscribeErr = status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5242880 vs. 4194304)")
	leader.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide", MaxInFlight: 10}}}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			leader.mu.Lock()
			n := leader.subscribes
			leader.mu.Unlock()
			t.Fatalf("Subscribe ended with %v after %d shard streams, want ResourceExhausted", err, n)
		}
		return
	}
}

// installVersion installs the proxy's table again under a newer version.
func installVersion(srv *Server) func(uint64) {
	var mu sync.Mutex
	return func(v uint64) {
		mu.Lock()
		defer mu.Unlock()
		rt := proto.Clone(srv.watcher.Table().Raw()).(*sundialv1.RoutingTable)
		if rt.Version < v {
			rt.Version = v
			srv.watcher.Install(rt)
		}
	}
}

// When the routing never settles (every round is refused as misplaced at
// a newer version), the proxy stops after maxReroutes and answers
// Unavailable, which the client may retry, not the broker's NotFound.
func TestPublishReroutesGiveUpUnavailable(t *testing.T) {
	srv, leader, conn := startCluster(t)
	leader.chase = true
	leader.onRefuse = installVersion(srv)
	req := &sundialv1.PublishRequest{RequestId: "r-chase", Messages: []*sundialv1.Message{{Topic: "wide", Payload: []byte("m")}}}
	resp, err := sundialv1.NewProducerClient(conn).Publish(t.Context(), req)
	if err != nil {
		t.Fatalf("Publish() = %v", err)
	}
	if got := codes.Code(resp.GetResults()[0].GetError().GetCode()); got != codes.Unavailable {
		t.Fatalf("Publish() result code = %v (%v), want Unavailable", got, resp.GetResults()[0].GetError())
	}
	if v := srv.watcher.Table().Version(); v != 3+maxReroutes+1 {
		t.Fatalf("table version = %d, want %d: one refusal per round", v, 3+maxReroutes+1)
	}
}
