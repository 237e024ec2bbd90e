package broker

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sundialmq/sundial/meta"
)

func TestReadiness(t *testing.T) {
	placed := meta.NewState()
	placed.Shards = map[meta.EventShardID]*meta.Shard{
		1: {ID: 1, Replicas: []meta.Replica{{ID: 1, Node: 1}, {ID: 2, Node: 2}}},
		2: {ID: 2, Replicas: []meta.Replica{{ID: 3, Node: 2}, {ID: 4, Node: 3}}},
	}
	starting := placed.Clone()
	for _, sh := range starting.Shards {
		sh.State = meta.ShardStarting
	}
	tests := []struct {
		name       string
		st         *meta.State
		hosted     []uint64
		leaders    map[uint64]uint64
		metaLeader uint64
		want       string // "" means ready
	}{
		{"ready", placed, []uint64{1}, map[uint64]uint64{1: 2}, 3, ""},
		{"no meta leader", placed, []uint64{1}, map[uint64]uint64{1: 2}, 0, "meta group"},
		{"not bootstrapped", meta.NewState(), nil, nil, 1, "no event shards"},
		{"first shards starting", starting, []uint64{1}, map[uint64]uint64{1: 2}, 3, "none is on the ring yet"},
		{"placed replica not started", placed, nil, nil, 1, "shard 1 placed on this node has not started"},
		{"shard without a leader", placed, []uint64{1}, map[uint64]uint64{1: 0}, 1, "shard 1 has no known leader"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, reason := readiness(tt.st, 1, tt.hosted, tt.leaders, tt.metaLeader)
			if ready != (tt.want == "") || !strings.Contains(reason, tt.want) {
				t.Fatalf("readiness() = %v, %q; want ready %v with a reason containing %q", ready, reason, tt.want == "", tt.want)
			}
		})
	}
}

func TestBrokerLivezAndReadyz(t *testing.T) {
	addr := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	// A port picked free can be taken by another package's test before the
	// broker binds it: such a start is tried again on fresh ports.
	var b *Server
	for try := 1; ; try++ {
		cfg := DefaultConfig()
		cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr, cfg.DataDir = addr(), addr(), "127.0.0.1:0", t.TempDir()
		cfg.AdminAddr = "127.0.0.1:0"
		cfg.InitialMembers = map[uint64]Member{1: {RaftAddr: cfg.RaftAddr, GRPCAddr: cfg.GRPCAddr}}
		cfg.Shards, cfg.RTT, cfg.CacheBytes, cfg.MemTableBytes = 2, 10*time.Millisecond, 1<<20, 1<<20
		var err error
		if b, err = New(cfg, zaptest.NewLogger(t), prometheus.NewRegistry()); err == nil {
			if err = b.Start(t.Context()); err != nil {
				b.Stop()
			}
		}
		if err == nil {
			break
		}
		if try == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("start on a taken port, trying again: %v", err)
	}
	t.Cleanup(b.Stop)
	getAt := func(addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	get := func(path string) (int, string) { return getAt(b.MetricsAddr(), path) }
	if code, body := get("/livez"); code != http.StatusOK {
		t.Fatalf("GET /livez = %d %q, want 200 as soon as the broker serves", code, body)
	}
	conn, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: ") {
			t.Fatalf("GET /readyz while starting = %d %q, want 503 with a reason", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz = %d %q after 60s, want 200 once the shards have leaders", code, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The gRPC health service, which proxies probe, follows within a few
	// polls of 20ms (it polled every 500ms before: 0-500ms behind). The
	// 250ms bound grows by however late this loop's own 5ms sleeps woke: a
	// busy machine delays the broker's poll timer as it delays them, so
	// the bound is decided by the poll interval, not by the machine.
	ready := time.Now()
	var late time.Duration // the sleeps' overshoot so far
	for grpcHealth() != healthpb.HealthCheckResponse_SERVING {
		if waited := time.Since(ready); waited > 250*time.Millisecond+late {
			t.Fatalf("gRPC health still %v %v after /readyz answered 200 (%v of it this goroutine's sleeps overslept)", grpcHealth(), waited, late)
		}
		slept := time.Now()
		time.Sleep(5 * time.Millisecond)
		late += max(0, time.Since(slept)-5*time.Millisecond)
	}
	t.Logf("gRPC health SERVING %v after /readyz 200", time.Since(ready).Round(time.Millisecond))
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz = %d once ready, want 200 (an alias of /readyz)", code)
	}
	if !b.Ready() {
		t.Fatal("Ready() = false while /readyz answers 200")
	}
	// The debug endpoints are on the admin listener, not the metrics one.
	for _, path := range []string{"/debug/pprof/", "/debug/pebble", "/debug/statehash"} {
		if code, body := getAt(b.AdminAddr(), path); code != http.StatusOK {
			t.Errorf("GET %s on the admin address = %d %q, want 200", path, code, body)
		}
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("GET %s on the metrics address = %d, want 404 (moved to admin_addr)", path, code)
		}
	}
}
