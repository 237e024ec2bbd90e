package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proxy/internal/forward"
	"github.com/sundialmq/sundial/proxy/internal/httpapi"
	"github.com/sundialmq/sundial/proxy/internal/quota"
	"github.com/sundialmq/sundial/proxy/internal/routing"
	"github.com/sundialmq/sundial/proxy/internal/subscribe"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// stopGrace is how long Stop lets in-flight calls finish before it cuts
// the remaining streams.
const stopGrace = 2 * time.Second

// Server is one proxy.
type Server struct {
	cfg      Config
	log      *zap.Logger
	gatherer prometheus.Gatherer
	metrics  *metrics

	pool    *routing.Pool
	watcher *routing.Watcher
	fwd     *forward.Forwarder
	acks    *ackCoalescer
	topics  *routing.Topics
	subs    *subscribe.Handler

	grpc      *grpc.Server
	health    *grpcHealth
	http      *http.Server
	admin     *http.Server // pprof; nil when Config.AdminAddr is empty
	metricsHS *http.Server // /metrics; nil unless Config.MetricsAddr is set
	refused   refusals
	readiness *readiness
	probing   context.CancelFunc // stops the readiness prober
	uiConn    *grpc.ClientConn   // the admin UI's client of s.grpc
	tls       transport          // listeners' and broker calls' credentials
	auth      *authGuard         // nil unless Config.Auth.Enabled
	quota     *quota.Limiter     // Config.Quotas
	bootstrap string             // the bootstrap token's secret, "" for none

	mu       sync.Mutex // guards the listeners, started, stopped
	grpcLis  net.Listener
	httpLis  net.Listener
	adminLis net.Listener
	metLis   net.Listener
	started  bool
	stopped  bool
	serveErr chan error
	wg       sync.WaitGroup // serving goroutines
}

// New builds a proxy from cfg. log may be nil (no logging); reg may be nil
// (a private registry). /metrics serves reg when it is also a
// prometheus.Gatherer (a *prometheus.Registry is), else the default
// gatherer.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: invalid config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	gatherer, ok := reg.(prometheus.Gatherer)
	if !ok {
		gatherer = prometheus.DefaultGatherer
	}
	s := &Server{
		cfg:      cfg,
		log:      log,
		gatherer: gatherer,
		metrics:  newMetrics(reg),
		serveErr: make(chan error, 4),
		refused:  newRefusals(reg),
	}
	var err error
	if s.tls, err = newTransport(cfg, log, reg); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.pool = routing.NewPool(grpc.WithTransportCredentials(s.tls.broker))
	s.watcher = routing.NewWatcher(routing.WatcherConfig{Seeds: cfg.Brokers, SilenceTimeout: cfg.WatchSilenceTimeout}, s.pool, log, routing.NewMetrics(reg), s.onTable)
	s.readiness = newReadiness(cfg.ReadyProbeInterval, s.watcher.Stale, log, reg)
	s.health = newGRPCHealth(s.Ready)
	s.fwd = forward.New(s.watcher, s.pool, cfg.Brokers, cfg.ForwardTimeout, forward.NewMetrics(reg))
	s.acks = newAckCoalescer(cfg.ForwardTimeout, s.fwd.DoUncut) // no request id: see settler
	s.topics = routing.NewTopics(s.lookupTopic)
	s.quota = quota.New(cfg.Quotas, reg)
	s.subs = &subscribe.Handler{
		Tables:      s.watcher,
		Topics:      s.topics,
		Pool:        s.pool,
		Forwarder:   s.fwd,
		Settler:     settler{s},
		Log:         log,
		Metrics:     subscribe.NewMetrics(reg),
		WaitTimeout: cfg.ForwardTimeout,
		Limits:      cfg.Limits,
		Pace: func(ctx context.Context, n int) (int, error) {
			return s.quota.Pace(ctx, principalOf(ctx), n)
		},
		NewGroup: s.newGroup,
	}

	unary := []grpc.UnaryServerInterceptor{s.unaryBoundary}
	stream := []grpc.StreamServerInterceptor{s.streamBoundary}
	if cfg.Auth.Enabled {
		if s.bootstrap, err = cfg.Auth.bootstrapSecret(); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		s.auth = s.newAuthGuard(reg)
		unary = append(unary, s.auth.guard.Unary)
		stream = append(stream, s.auth.guard.Stream)
	}
	lim := cfg.ListenLimits.withDefaults()
	s.grpc = grpc.NewServer(append(lim.grpcOptions(),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		s.tls.server,
	)...)
	sundialv1.RegisterProducerServer(s.grpc, producer{s: s})
	sundialv1.RegisterConsumerServer(s.grpc, consumer{s: s})
	sundialv1.RegisterAdminServer(s.grpc, admin{s: s})
	sundialv1.RegisterClusterServer(s.grpc, cluster{s: s})
	sundialv1.RegisterAuthServer(s.grpc, authService{s: s})
	sundialv1.RegisterBackupsServer(s.grpc, backups{s: s})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	guard := newHTTPGuard(cfg, s.refused)
	mux := http.NewServeMux()
	metricsHandler := promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	if cfg.MetricsAddr == "" {
		mux.Handle("/metrics", metricsHandler)
	} else {
		mm := http.NewServeMux()
		mm.Handle("/metrics", metricsHandler)
		s.metricsHS = lim.httpServer(mm)
	}
	mux.HandleFunc("/livez", livez)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/healthz", s.readyz) // an alias of /readyz
	if err := s.mountHTTPAPI(mux, guard); err != nil {
		return nil, err
	}
	adminUI, uiConn, err := s.newUI()
	if err != nil {
		return nil, err
	}
	s.uiConn = uiConn
	mux.Handle("/ui/", guard.host(adminUI))
	s.http = lim.httpServer(mux)
	if cfg.AdminAddr != "" {
		am := http.NewServeMux()
		am.HandleFunc("/debug/pprof/", pprof.Index)
		am.HandleFunc("/debug/pprof/profile", pprof.Profile)
		am.HandleFunc("/debug/pprof/trace", pprof.Trace)
		s.admin = lim.httpServer(am)
		// A CPU profile or trace runs for its ?seconds= (30 by default).
		s.admin.WriteTimeout = 0
	}
	return s, nil
}

// mountHTTPAPI serves the HTTP/JSON API transcoded onto s.grpc (every service
// is registered by now), /openapi.json and /docs, behind guard.
func (s *Server) mountHTTPAPI(mux *http.ServeMux, guard *httpGuard) error {
	api, err := httpapi.New(s.grpc)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	sub := http.NewServeMux()
	api.Mount(sub)
	mux.Handle("/v1/", guard.host(guard.api(sub)))
	mux.Handle("/openapi.json", guard.host(sub))
	mux.Handle("/docs", guard.host(sub))
	mux.Handle("/docs/", guard.host(sub))
	return nil
}

// onTable runs on the watcher goroutine after each new table: readiness
// is probed against it at once.
func (s *Server) onTable(*routing.Table) { s.readiness.poke() }

// Start listens on the configured addresses and starts serving. It
// returns once the listeners are open; serving continues until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("proxy: already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var lc net.ListenConfig
	var open []net.Listener
	listen := func(name, addr string) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		l, err := s.listen(ctx, &lc, name, addr)
		if err != nil {
			for _, o := range open {
				_ = o.Close()
			}
			return nil, err
		}
		open = append(open, l)
		return l, nil
	}
	gl, err := listen("grpc", s.cfg.GRPCAddr)
	if err != nil {
		return err
	}
	hl, err := listen("http", s.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	if hl != nil && s.tls.http != nil {
		hl = tls.NewListener(hl, s.tls.http)
	}
	al, err := listen("admin", s.cfg.AdminAddr)
	if err != nil {
		return err
	}
	ml, err := listen("metrics", s.cfg.MetricsAddr)
	if err != nil {
		return err
	}
	s.grpcLis, s.httpLis, s.adminLis, s.metLis, s.started = gl, hl, al, ml, true
	// The background goroutines outlive Start's ctx: they keep its values
	// but end on Stop, not when ctx is cancelled.
	life := context.WithoutCancel(ctx)
	s.watcher.Start(life)
	pctx, cancel := context.WithCancel(life)
	s.probing = cancel
	s.wg.Go(func() { s.readiness.run(pctx, s.watcher.Table, s.pool) })
	s.wg.Go(func() { s.health.follow(pctx) })
	if s.auth != nil {
		s.auth.watcher.Start(life)
		if s.bootstrap != "" {
			s.wg.Go(func() { s.bootstrapAuth(pctx, s.bootstrap) })
		}
	}
	s.wg.Go(func() {
		if err := s.grpc.Serve(gl); err != nil {
			s.log.Error("grpc server stopped", zap.Error(err))
			s.serveErr <- err
		}
	})
	s.serveHTTP("http", s.http, hl)
	s.serveHTTP("admin", s.admin, al)
	s.serveHTTP("metrics", s.metricsHS, ml)
	if s.cfg.Insecure {
		s.log.Warn(tlsfiles.InsecureWarning)
	}
	s.log.Info("proxy started", zap.String("grpc_addr", gl.Addr().String()), zap.String("http_addr", s.httpAddrLocked()),
		zap.String("admin_addr", addrOf(al)), zap.String("metrics_addr", addrOf(ml)), zap.Strings("brokers", s.cfg.Brokers))
	return nil
}

// serveHTTP serves srv on l until Stop (nothing when l is nil).
func (s *Server) serveHTTP(name string, srv *http.Server, l net.Listener) {
	if l == nil {
		return
	}
	s.wg.Go(func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error(name+" server stopped", zap.Error(err))
			s.serveErr <- err
		}
	})
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// Err yields an error when the gRPC or HTTP server stopped serving on its
// own, for main to exit on.
func (s *Server) Err() <-chan error { return s.serveErr }

// Stop stops serving, lets in-flight calls finish for a short grace period
// and then cuts open streams, stops the routing watcher and closes broker
// connections. It is safe to call more than once and before Start.
func (s *Server) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	started := s.started
	s.mu.Unlock()
	s.health.Shutdown()
	if started {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		_ = s.http.Shutdown(ctx)
		for _, srv := range []*http.Server{s.admin, s.metricsHS} {
			if srv != nil {
				_ = srv.Close() // a running profile is cut off
			}
		}
		s.probing()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
		s.wg.Wait()
		s.watcher.Stop()
		if s.auth != nil {
			s.auth.watcher.Stop()
		}
	}
	s.pool.Close()
	_ = s.uiConn.Close()
	s.log.Info("proxy stopped")
}

// GRPCAddr is the address the gRPC server listens on ("" before Start).
func (s *Server) GRPCAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// HTTPAddr is the address the HTTP server listens on ("" before Start or
// when HTTP is disabled).
func (s *Server) HTTPAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.httpAddrLocked()
}

// httpAddrLocked is HTTPAddr for callers holding s.mu.
func (s *Server) httpAddrLocked() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// AdminAddr is the address serving pprof ("" before Start or when
// disabled).
func (s *Server) AdminAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return addrOf(s.adminLis)
}

// MetricsAddr is the address serving /metrics on its own ("" before Start
// or when /metrics is on HTTPAddr).
func (s *Server) MetricsAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return addrOf(s.metLis)
}

// Ready reports whether the proxy can serve: it has a routing table and
// its latest probe reached the leader of every event shard (see readiness).
func (s *Server) Ready() bool {
	ready, _ := s.readiness.state()
	return ready
}
