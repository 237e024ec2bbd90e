package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

// readiness is what /readyz, /healthz and the gRPC health service answer:
// the proxy has a routing table, its routing watch is not stale (it heard
// the broker it follows within the silence bound, see
// routing.Watcher.Stale) and, in its latest probe round, it reached the
// broker the table names as leader of every event shard (a gRPC health
// Check answered SERVING, which a broker does while each replica it hosts
// knows its leader). The prober goroutine, started in Start and joined in
// Stop, is its only writer.
type readiness struct {
	interval time.Duration
	stale    func() (bool, string) // the routing watch's staleness
	log      *zap.Logger
	gauge    prometheus.Gauge
	now      chan struct{} // a new routing table: probe at once

	mu     sync.Mutex // guards ready, reason
	ready  bool
	reason string
}

func newReadiness(interval time.Duration, stale func() (bool, string), log *zap.Logger, reg prometheus.Registerer) *readiness {
	r := &readiness{
		interval: interval, stale: stale, log: log, now: make(chan struct{}, 1), reason: "no routing table yet",
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_proxy_ready",
			Help: "1 while the proxy is ready (/readyz 200): it has a routing table, its routing watch is not stale, and it reached the leader of every event shard in its latest probe.",
		}),
	}
	reg.MustRegister(r.gauge)
	return r
}

// state answers whether the proxy is ready and, if not, why. A stale
// routing watch counts at once; the rest is the latest probe round's.
func (r *readiness) state() (bool, string) {
	if stale, why := r.stale(); stale {
		return false, why
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.reason
}

// poke asks for a probe round now.
func (r *readiness) poke() {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// notReadyProbeInterval is how soon a proxy that is not ready probes again
// (unless its probe interval is shorter), so that it turns ready within
// about this long of the cluster rather than up to a whole interval later.
const notReadyProbeInterval = 200 * time.Millisecond

// run probes until ctx ends: at once, after each new table, and every
// interval while ready or every notReadyProbeInterval while not.
func (r *readiness) run(ctx context.Context, tables func() *routing.Table, pool *routing.Pool) {
	t := time.NewTimer(r.interval)
	defer t.Stop()
	for {
		ready, reason := false, ""
		if stale, why := r.stale(); stale {
			reason = why
		} else {
			ready, reason = probe(ctx, tables(), pool, r.interval)
		}
		if ctx.Err() != nil {
			return
		}
		r.set(ready, reason)
		next := r.interval
		if !ready {
			next = min(next, notReadyProbeInterval)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.now:
		}
	}
}

func (r *readiness) set(ready bool, reason string) {
	r.mu.Lock()
	changed := r.ready != ready
	r.ready, r.reason = ready, reason
	r.mu.Unlock()
	if !changed {
		return
	}
	if ready {
		r.gauge.Set(1)
		r.log.Info("proxy ready")
	} else {
		r.gauge.Set(0)
		r.log.Warn("proxy not ready", zap.String("reason", reason))
	}
}

// healthServices are the names the gRPC health service answers for: the
// whole server ("") and each public service.
var healthServices = []string{"", sundialv1.Producer_ServiceDesc.ServiceName, sundialv1.Consumer_ServiceDesc.ServiceName, sundialv1.Admin_ServiceDesc.ServiceName,
	sundialv1.Cluster_ServiceDesc.ServiceName, sundialv1.Auth_ServiceDesc.ServiceName, sundialv1.Backups_ServiceDesc.ServiceName}

// grpcHealth is the proxy's grpc.health.v1.Health service. Check answers
// readiness at the moment it is asked, exactly as /readyz does (a probe
// that hears SERVING finds /readyz 200); Watch streams the statuses the
// follow goroutine sets on the embedded server from the same readiness.
// After Shutdown (Stop) every answer is NOT_SERVING.
type grpcHealth struct {
	*health.Server
	ready    func() bool
	shutdown atomic.Bool
}

func newGRPCHealth(ready func() bool) *grpcHealth {
	h := &grpcHealth{Server: health.NewServer(), ready: ready}
	for _, svc := range healthServices {
		h.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return h
}

// Check answers NOT_FOUND for a service the proxy does not serve, else
// the proxy's readiness now.
func (h *grpcHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	resp, err := h.Server.Check(ctx, req)
	if err != nil || h.shutdown.Load() {
		return resp, err
	}
	return &healthpb.HealthCheckResponse{Status: servingStatus(h.ready())}, nil
}

// Shutdown sets every status NOT_SERVING for good.
func (h *grpcHealth) Shutdown() {
	h.shutdown.Store(true)
	h.Server.Shutdown()
}

// Health polls: follow re-reads readiness every healthPollNotServing while
// not serving and every healthPollServing while serving, so that a Watch
// stream hears a change within that long (Check needs no poll).
const (
	healthPollServing    = 100 * time.Millisecond
	healthPollNotServing = 20 * time.Millisecond
)

// follow keeps the statuses Watch streams equal to readiness until ctx
// ends.
func (h *grpcHealth) follow(ctx context.Context) {
	t := time.NewTimer(healthPollNotServing)
	defer t.Stop()
	for {
		ready := h.ready()
		for _, svc := range healthServices {
			h.SetServingStatus(svc, servingStatus(ready))
		}
		next := healthPollNotServing
		if ready {
			next = healthPollServing
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func servingStatus(ready bool) healthpb.HealthCheckResponse_ServingStatus {
	if ready {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// probe checks, concurrently and within timeout, the health of each broker
// the table names as a shard leader; it answers ready only if every shard
// has a named leader and each of them answered SERVING.
func probe(ctx context.Context, table *routing.Table, pool *routing.Pool, timeout time.Duration) (bool, string) {
	if table == nil {
		return false, "no routing table yet"
	}
	if table.ShardCount() == 0 {
		return false, "routing table has no event shards"
	}
	leads := map[string]uint64{} // broker address → one shard it leads
	for _, sh := range table.Raw().GetShards() {
		addr := table.NodeAddr(sh.GetLeaderNodeId())
		if sh.GetLeaderNodeId() == 0 || addr == "" {
			return false, fmt.Sprintf("shard %d has no known leader", sh.GetShardId())
		}
		leads[addr] = sh.GetShardId()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	var failed string
	var wg sync.WaitGroup
	for addr, shard := range leads {
		wg.Go(func() {
			err := checkServing(ctx, pool, addr)
			if err != nil {
				mu.Lock()
				failed = fmt.Sprintf("broker %s, leader of shard %d, is not reachable and serving: %v", addr, shard, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != "" {
		return false, failed
	}
	return true, ""
}

func checkServing(ctx context.Context, pool *routing.Pool, addr string) error {
	conn, err := pool.Conn(addr)
	if err != nil {
		return err
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health %s", resp.GetStatus())
	}
	return nil
}

// livez answers 200 while the process serves HTTP.
func livez(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 when the proxy is ready, else 503 with the reason;
// a proxy started insecure adds tlsfiles.InsecureWarning on a line of its
// own.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	warning := ""
	if s.cfg.Insecure {
		warning = tlsfiles.InsecureWarning + "\n"
	}
	if ready, reason := s.readiness.state(); !ready {
		http.Error(w, "not ready: "+reason+"\n"+warning, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n" + warning))
}
