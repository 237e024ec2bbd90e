package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// restartable is a fake broker that can stop and come back on its address.
type restartable struct {
	t    *testing.T
	b    *fakeBroker
	addr string
	g    *grpc.Server
	// health is the health service of the latest start; it answers SERVING
	// unless the test sets otherwise.
	health *health.Server
}

func (r *restartable) start() {
	r.t.Helper()
	var lis net.Listener
	var err error
	for range 100 { // the port may linger briefly after a stop
		if lis, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatalf("listen %s again: %v", r.addr, err)
	}
	r.addr = lis.Addr().String()
	r.g = grpc.NewServer()
	sundialv1.RegisterClusterServer(r.g, r.b)
	brokerv1.RegisterShardServer(r.g, r.b)
	r.health = health.NewServer()
	healthpb.RegisterHealthServer(r.g, r.health)
	go func() { _ = r.g.Serve(lis) }()
}

func (r *restartable) stop() { r.g.Stop() }

// httpCode answers the status code of GET path on the proxy, 0 on error.
func httpCode(t *testing.T, srv *Server, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 60*time.Second, what, cond)
}

func waitWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReadyzFollowsTheBrokers(t *testing.T) {
	b := &restartable{t: t, b: &fakeBroker{leader: true, published: map[uint64]int{}}, addr: "127.0.0.1:0"}
	b.start()
	t.Cleanup(b.stop)
	addr := b.addr
	b.b.table = func() *sundialv1.RoutingTable {
		rt := &sundialv1.RoutingTable{Version: 1, Nodes: []*sundialv1.Node{{NodeId: 1, GrpcAddr: addr}}}
		for id := uint64(1); id <= 2; id++ {
			rt.Shards = append(rt.Shards, &sundialv1.Shard{ShardId: id, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}}})
		}
		return rt
	}
	srv := startProxy(t, addr, func(cfg *Config) { cfg.ReadyProbeInterval = 50 * time.Millisecond })
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcHealth := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return resp.GetStatus()
	}
	ready := func(code int) func() bool {
		return func() bool { return httpCode(t, srv, "/readyz") == code && httpCode(t, srv, "/healthz") == code }
	}

	waitFor(t, "/readyz and /healthz 200 with the broker up", ready(http.StatusOK))
	if got := grpcHealth(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health with the broker up = %v, want SERVING", got)
	}

	b.stop()
	waitFor(t, "/readyz and /healthz 503 with every broker stopped", ready(http.StatusServiceUnavailable))
	if srv.Ready() {
		t.Error("Ready() = true with every broker stopped")
	}
	if got := grpcHealth(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health with every broker stopped = %v, want NOT_SERVING", got)
	}
	if got := httpCode(t, srv, "/livez"); got != http.StatusOK {
		t.Errorf("GET /livez with every broker stopped = %d, want 200: the process is up", got)
	}

	b.start()
	waitFor(t, "/readyz and /healthz 200 once the broker is back", ready(http.StatusOK))
}

// After a long outage of every broker the proxy is ready again within
// seconds of their return: its connections and its routing watch dial a
// broker that went away at least once a second (gRPC's default reconnect
// backoff would have grown past 6s by now, the watch's past 3s).
func TestReadyAgainSoonAfterALongOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20s outage")
	}
	b := restartableLeader(t)
	srv := startProxy(t, b.addr, nil)
	waitFor(t, "ready with the broker up", srv.Ready)
	b.stop()
	waitFor(t, "not ready with the broker stopped", func() bool { return !srv.Ready() })
	time.Sleep(20 * time.Second)
	b.start()
	back := time.Now()
	waitWithin(t, 5*time.Second, "ready after the broker came back", srv.Ready)
	t.Logf("ready %v after the broker came back", time.Since(back).Round(time.Millisecond))
}

// A proxy that is not ready probes again soon, not a whole probe interval
// later: after a cluster restart its clients are refused only until the
// brokers serve.
func TestReadyzTurnsReadySoonAfterTheLeaderServes(t *testing.T) {
	b := restartableLeader(t)
	b.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := startProxy(t, b.addr, func(cfg *Config) {
		// Only the not-ready re-probe (200ms) can turn the proxy ready
		// within the 10s allowed below (without it: 31s, when the watch's
		// table happened to arrive again).
		cfg.ReadyProbeInterval = 10 * time.Minute
	})

	var body string
	waitFor(t, "/readyz 503 naming the leader that does not serve", func() bool {
		var code int
		code, body = httpBody(t, srv, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "not reachable and serving")
	})
	t.Logf("leader not serving: %s", strings.TrimSpace(body))
	b.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitWithin(t, 10*time.Second, "/readyz 200 once the leader serves, long before the next 10-minute probe", func() bool { code, _ := httpBody(t, srv, "/readyz"); return code == http.StatusOK })
}

// Start's ctx bounds only the start: the routing watcher and the readiness
// prober run on after it is cancelled, until Stop.
func TestStartContextBoundsOnlyTheStart(t *testing.T) {
	_, addr := oneShardBroker(t, false)
	cfg := DefaultConfig()
	cfg.AdminAddr = "" // no pprof listener: tests run side by side
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Brokers = "127.0.0.1:0", "", []string{addr}
	cfg.ReadyProbeInterval = 50 * time.Millisecond
	srv, err := New(cfg, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cancel()
	waitFor(t, "routing table and readiness after Start's ctx was cancelled", srv.Ready)
}

// oneShardBroker serves a fake broker leading the one shard of its routing
// table (sending progress frames when asked, if progress), and answers it
// and its address.
func oneShardBroker(t *testing.T, progress bool) (*fakeBroker, string) {
	t.Helper()
	b := &fakeBroker{leader: true, published: map[uint64]int{}, progress: progress}
	addr := serve(t, b)
	b.table = func() *sundialv1.RoutingTable { return oneShardTable(addr) }
	return b, addr
}

// oneShardTable is the routing table of one broker, at addr, leading the
// one shard.
func oneShardTable(addr string) *sundialv1.RoutingTable {
	return &sundialv1.RoutingTable{
		Version: 1,
		Nodes:   []*sundialv1.Node{{NodeId: 1, GrpcAddr: addr}},
		Shards:  []*sundialv1.Shard{{ShardId: 1, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}}}},
	}
}

// restartableLeader starts a fake broker that can stop and come back,
// leading the one shard of its routing table.
func restartableLeader(t *testing.T) *restartable {
	t.Helper()
	b := &restartable{t: t, b: &fakeBroker{leader: true, published: map[uint64]int{}}, addr: "127.0.0.1:0"}
	b.start()
	t.Cleanup(b.stop)
	addr := b.addr
	b.b.table = func() *sundialv1.RoutingTable { return oneShardTable(addr) }
	return b
}

// startProxy starts a proxy seeded with broker, on free ports, its
// default configuration changed by tune (if not nil); it stops at cleanup.
func startProxy(t *testing.T, broker string, tune func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.AdminAddr = "" // no pprof listener: tests run side by side
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Brokers = "127.0.0.1:0", "127.0.0.1:0", []string{broker}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := New(cfg, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// httpBody answers the status code and body of GET path on the proxy.
func httpBody(t *testing.T, srv *Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// While the broker the routing watch follows sends nothing (frozen, its
// connection open and its health still answering), /readyz says not ready
// naming the stale watch, and ready again once the broker speaks.
func TestReadyzSaysWhenTheRoutingWatchIsStale(t *testing.T) {
	b, addr := oneShardBroker(t, true)
	srv := startProxy(t, addr, func(cfg *Config) {
		cfg.ReadyProbeInterval = 50 * time.Millisecond
		cfg.WatchSilenceTimeout = 400 * time.Millisecond
	})

	waitFor(t, "/readyz 200 with the broker speaking", func() bool { code, _ := httpBody(t, srv, "/readyz"); return code == http.StatusOK })
	b.frozen.Store(true)
	var body string
	waitFor(t, "/readyz 503 naming the stale routing watch", func() bool {
		var code int
		code, body = httpBody(t, srv, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "routing watch stale") && strings.Contains(body, addr)
	})
	t.Logf("frozen: %s", strings.TrimSpace(body))
	if srv.Ready() {
		t.Error("Ready() = true while the routing watch is stale")
	}
	b.frozen.Store(false)
	waitFor(t, "/readyz 200 once the broker speaks again", func() bool { code, _ := httpBody(t, srv, "/readyz"); return code == http.StatusOK })
}

// The gRPC health service answers what /readyz answers: NOT_SERVING while
// /readyz is 503 (here a routing watch gone stale between two probe rounds,
// the next ten minutes away) and SERVING once it is 200 again. Before, it
// changed only at a probe round, so it stayed SERVING through the stale
// watch.
func TestGRPCHealthFollowsReadyz(t *testing.T) {
	b, addr := oneShardBroker(t, true)
	srv := startProxy(t, addr, func(cfg *Config) {
		cfg.ReadyProbeInterval = 10 * time.Minute
		cfg.WatchSilenceTimeout = 400 * time.Millisecond
	})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcHealth := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("gRPC health Check(%q): %v", service, err)
		}
		return resp.GetStatus()
	}
	services := []string{"", sundialv1.Producer_ServiceDesc.ServiceName, sundialv1.Admin_ServiceDesc.ServiceName}
	readyz := func() int { code, _ := httpBody(t, srv, "/readyz"); return code }

	waitFor(t, "/readyz 200 with the broker speaking", func() bool { return readyz() == http.StatusOK })
	for _, svc := range services {
		if got := grpcHealth(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q with /readyz 200 = %v, want SERVING", svc, got)
		}
	}

	b.frozen.Store(true)
	waitFor(t, "/readyz 503 with the routing watch stale", func() bool { return readyz() == http.StatusServiceUnavailable })
	for _, svc := range services {
		if got := grpcHealth(svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("gRPC health %q with /readyz 503 = %v, want NOT_SERVING", svc, got)
		}
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d after the health checks, want still 503 (the broker is frozen)", code)
	}

	b.frozen.Store(false)
	waitFor(t, "/readyz 200 once the broker speaks again", func() bool { return readyz() == http.StatusOK })
	for _, svc := range services {
		if got := grpcHealth(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q with /readyz 200 again = %v, want SERVING", svc, got)
		}
	}
}
