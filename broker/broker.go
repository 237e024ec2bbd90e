package broker

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/sundialmq/sundial/broker/internal/backup"
	"github.com/sundialmq/sundial/broker/internal/dispatch"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/identity"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/broker/internal/service"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/validate"
)

// Server is a running broker.
type Server struct {
	cfg Config
	log *zap.Logger
	reg prometheus.Registerer
	gth prometheus.Gatherer

	host     *host.Host
	operator *operator.Executor
	backups  *operator.Backups
	healer   *operator.Healer
	prober   *operator.PeerProber
	moves    *operator.RoutedHost // the executor's host
	peers    *peer.Conns          // every connection to another broker; closed last in Stop
	grpc     *grpc.Server
	health   *health.Server
	lis      net.Listener
	httpSrv  *http.Server
	httpLis  net.Listener
	adminSrv *http.Server // pprof and /debug/*, on AdminAddr
	adminLis net.Listener
	tls      transport // the gRPC listener's and peer dials' credentials

	stopOnce sync.Once
	wg       sync.WaitGroup
	stopc    chan struct{}
}

// New checks cfg and prepares a broker. reg receives the broker's metrics;
// if it is also a Gatherer it is served on /metrics.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("broker: invalid config: %w", err)
	}
	if cfg.NodeID != 0 {
		log = log.With(zap.Uint64("node_id", cfg.NodeID)) // a joining broker without one gets it in Start
	}
	s := &Server{cfg: cfg, log: log, reg: reg, stopc: make(chan struct{})}
	var err error
	if s.tls, err = newTransport(cfg, log, reg); err != nil {
		return nil, err
	}
	s.peers = peer.New(s.tls.peer)
	if g, ok := reg.(prometheus.Gatherer); ok {
		s.gth = g
	}
	return s, nil
}

// Start listens, starts the NodeHost and serves. It returns once serving;
// the cluster becomes usable when the shards elect leaders. A broker with
// Join first joins the cluster (on its first start; see joinCluster).
func (s *Server) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.peers.Close() // the start-up checks' and join's connections
		}
	}()
	// A member checks its data dir before taking any port, so a refusal
	// says what is wrong with the data dir even when the ports are in
	// use; a joining broker first needs its gRPC address to send it.
	var ident identity.Identity
	joining, waiting := len(s.cfg.Join) > 0, s.cfg.waiting()
	if !joining && !waiting {
		if ident, err = s.admit(ctx); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("broker: listen grpc: %w", err)
	}
	s.lis = lis
	// The metrics address is taken before the NodeHost starts, so a port
	// clash fails the start without touching the data dir's raft state.
	var httpLis, adminLis net.Listener
	if s.cfg.MetricsAddr != "" {
		if httpLis, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			lis.Close()
			return fmt.Errorf("broker: listen metrics: %w", err)
		}
	}
	if s.cfg.AdminAddr != "" {
		if adminLis, err = net.Listen("tcp", s.cfg.AdminAddr); err != nil {
			lis.Close()
			if httpLis != nil {
				httpLis.Close()
			}
			return fmt.Errorf("broker: listen admin: %w", err)
		}
	}
	if s.cfg.Insecure {
		s.log.Warn(tlsfiles.InsecureWarning)
	}
	closeListeners := func() {
		lis.Close()
		if httpLis != nil {
			httpLis.Close()
		}
		if adminLis != nil {
			adminLis.Close()
		}
	}
	// One Boundary (its counter is registered once) for the waiting
	// server and the full one.
	boundary := service.NewBoundary(s.log, s.reg)
	gate := service.NewGate(s.cfg.tlsFiles().Enabled(), s.log, s.reg)
	advertise := s.cfg.AdvertiseAddr
	if advertise == "" {
		advertise = lis.Addr().String()
	}
	switch {
	case joining:
		ident, err = s.joinCluster(ctx, advertise, "")
	case waiting:
		ident, lis, err = s.waitForAdd(ctx, boundary, gate, lis, advertise)
		s.lis = lis
	}
	if err != nil {
		closeListeners()
		return err
	}
	if s.cfg.NodeID != ident.NodeID {
		s.cfg.NodeID = ident.NodeID
		s.log = s.log.With(zap.Uint64("node_id", ident.NodeID))
	}
	// Count this start before any replica opens the data dir: a copy of
	// it taken before now then holds a lower count than the meta state.
	ident.Starts++
	if err := identity.Save(s.cfg.DataDir, ident); err != nil {
		closeListeners()
		return fmt.Errorf("broker: %w", err)
	}
	hc := hostConfig(s.cfg, advertise)
	hc.Incarnation, hc.ClusterID, hc.Starts, hc.Run = ident.Incarnation, ident.ClusterID, ident.Starts, identity.NewRunID()
	hc.RecordClusterID = func(id string) error {
		ident.ClusterID = id
		return identity.Save(s.cfg.DataDir, ident)
	}
	h, err := host.New(hc, s.log, s.reg)
	if err != nil {
		closeListeners()
		return err
	}
	s.host = h
	if err := h.Start(ctx); err != nil {
		h.Stop()
		closeListeners()
		return err
	}
	opts := service.Options{
		Limits: validate.Limits{
			MaxMessageBytes: s.cfg.MaxMessageBytes, MaxDelay: s.cfg.MaxDelay,
			MaxKeyBytes: validate.DefaultLimits().MaxKeyBytes, MaxBatch: validate.DefaultLimits().MaxBatch,
			MaxHeaderBytes: validate.DefaultLimits().MaxHeaderBytes,
		},
		AutoCreateTopics:         s.cfg.AutoCreateTopics,
		DefaultVisibilityTimeout: s.cfg.VisibilityTimeout,
		DefaultMaxAttempts:       s.cfg.MaxAttempts,
		DefaultRetention:         s.cfg.Retention,
		DefaultDedupWindow:       s.cfg.DedupWindow,
		Now:                      time.Now,
		StepTimeouts:             stepTimeouts(s.cfg.Operations),
		Peers:                    s.peers,
		// A token on a plaintext network is weak, but it is what keeps an
		// insecure cluster from admitting any process that asks.
		RequireJoinToken: s.cfg.tlsFiles().Enabled() || s.cfg.Insecure,
		Gate:             gate,
	}
	// Cluster control (package operator) is built before the services
	// that call it: the meta-voter policy, the healer, the executor.
	s.prober = operator.NewPeerProber(s.peers)
	ch := clusterHost{h.MetaClient(), h.Replicas(), h.Moves()}
	voters := operator.NewMetaVoters(ch, s.prober, s.cfg.NodeID, s.log)
	s.healer = operator.NewHealer(ch, s.prober, voters, s.cfg.NodeID, operator.HealerConfig{
		DeadNodeTimeout: s.cfg.DeadNodeTimeout, SuspectAfter: s.cfg.SuspectNodeTimeout,
		MaxRunning: s.cfg.Operations.MaxRunning, Timeouts: opts.StepTimeouts,
	}, s.log, s.reg)
	s.moves = operator.NewRoutedHost(ch, s.cfg.NodeID, s.peers, s.log, s.reg)
	s.operator = operator.New(s.moves, s.peers, s.cfg.NodeID, operatorConfig(s.cfg), s.log, s.reg)
	admin := service.NewAdmin(h, s.healer, opts)
	s.grpc = grpc.NewServer(append(append(boundary.ServerOptions(), gate.ServerOptions()...), grpc.MaxRecvMsgSize(64<<20),
		// Proxies ping every 5s to find a broker that stopped answering;
		// the default policy (5 min) would answer them GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveMinTime, PermitWithoutStream: true}), s.tls.server)...)
	brokerv1.RegisterShardServer(s.grpc, service.NewShard(h, admin, opts, s.log, service.NewMetrics(s.reg)))
	sundialv1.RegisterAdminServer(s.grpc, admin)
	sundialv1.RegisterClusterServer(s.grpc, service.NewCluster(h, voters, s.healer, opts, s.log))
	auth := service.NewAuth(h, time.Now)
	sundialv1.RegisterAuthServer(s.grpc, auth)
	brokerv1.RegisterAuthSyncServer(s.grpc, auth)
	s.operator.Start(context.WithoutCancel(ctx))
	s.healer.Start(context.WithoutCancel(ctx))
	backupMetrics := backup.NewMetrics(s.reg)
	stores := backup.NewStores(s.cfg.BackupCredentialsFile, s.log.Named("backup"), backupMetrics)
	brokerv1.RegisterPeerServer(s.grpc, service.NewPeer(h, s.cfg.NodeID, backup.NewCapturer(h.DB(), filepath.Join(s.cfg.DataDir, "backup-spool"), stores)))
	sundialv1.RegisterBackupsServer(s.grpc, service.NewBackups(h, s.peers, stores, backupMetrics, s.log))
	s.backups = operator.NewBackups(ch, s.peers, stores, backupMetrics, s.cfg.NodeID, 0, s.log)
	s.backups.Start(context.WithoutCancel(ctx))
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("grpc server stopped", zap.Error(err))
		}
	}()
	if httpLis != nil {
		if s.tls.metrics != nil {
			httpLis = tls.NewListener(httpLis, s.tls.metrics)
		}
		s.serveHTTP(httpLis)
	}
	if adminLis != nil {
		s.serveAdmin(adminLis)
	}
	s.wg.Add(1)
	go s.watchHealth()
	s.wg.Add(1)
	go s.gossipLeaders(context.WithoutCancel(ctx), h)
	s.log.Info("broker started", zap.String("grpc_addr", lis.Addr().String()), zap.String("raft_addr", s.cfg.RaftAddr))
	return nil
}

// clusterHost is the host as package operator sees it (the interfaces
// ReplicaHost, HealerHost and VoterHost): h's meta client, replica and
// leader table, and membership changes, composed here so that each keeps
// its own job in package host.
type clusterHost struct {
	*host.MetaClient
	*host.Replicas
	*host.Moves
}

// hostConfig maps cfg onto the host's settings; advertise is the gRPC
// address peers and proxies reach this broker at.
func hostConfig(cfg Config, advertise string) host.Config {
	members := make(map[uint64]host.Member, len(cfg.InitialMembers))
	for id, m := range cfg.InitialMembers {
		members[id] = host.Member{RaftAddr: m.RaftAddr, GRPCAddr: m.GRPCAddr}
	}
	return host.Config{
		NodeID: cfg.NodeID, RaftAddr: cfg.RaftAddr, RaftListenAddr: cfg.RaftListenAddr, GRPCAddr: advertise, DataDir: cfg.DataDir,
		InitialMembers: members, Join: len(cfg.InitialMembers) == 0,
		RTT: cfg.RTT, ElectionRTT: cfg.ElectionRTT, HeartbeatRTT: cfg.HeartbeatRTT,
		SnapshotEntries: cfg.SnapshotEntries, CompactionOverhead: cfg.RaftLogKeepEntries, RaftWorkers: cfg.RaftWorkers, RaftLogShards: cfg.RaftLogShards,
		CacheBytes: cfg.CacheBytes, MemTableBytes: cfg.MemTableBytes,
		// The dispatcher's sweep forgets publish request ids older than
		// the window: a retry within it is answered, not stored again.
		Dispatch: dispatch.Config{DedupWindow: cfg.DedupWindow, SweepInterval: cfg.Testing.SweepInterval},
		HoldMeta: cfg.Testing.HoldMeta,
		Labels:   maps.Clone(cfg.Labels),
		RaftTLS:  cfg.raftTLSFiles(),
	}
}

// operatorConfig maps cfg onto the executor's settings: its cap, and what
// the meta leader's executor needs to create the first shards (the initial
// members it waits for, the shard count and replication factor).
func operatorConfig(cfg Config) operator.Config {
	return operator.Config{MaxRunning: cfg.Operations.MaxRunning, Shards: operator.ShardsConfig{
		InitialMembers: slices.Sorted(maps.Keys(cfg.InitialMembers)), Shards: cfg.Shards, ReplicationFactor: cfg.ReplicationFactor,
	}}
}

// serveHTTP serves /metrics and the health endpoints on lis until Stop
// (a TLS listener when the broker has TLS files).
func (s *Server) serveHTTP(lis net.Listener) {
	s.httpLis = lis
	mux := http.NewServeMux()
	if s.gth != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(s.gth, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/livez", livez)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/healthz", s.readyz) // an alias of /readyz
	s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.httpSrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics server stopped", zap.Error(err))
		}
	}()
}

// serveAdmin serves pprof, /debug/pebble and /debug/statehash on lis
// (AdminAddr) until Stop.
func (s *Server) serveAdmin(lis net.Listener) {
	s.adminLis = lis
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pebble", func(w http.ResponseWriter, _ *http.Request) {
		// The state DB's LSM shape, block cache and compaction counters.
		fmt.Fprint(w, s.host.DB().Metrics().String())
	})
	mux.HandleFunc("/debug/statehash", s.serveStateHashes)
	s.adminSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.adminSrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", zap.Error(err))
		}
	}()
}

// Health polls: the gRPC health service follows Ready every
// healthPollServing while serving and every healthPollNotServing while
// not, so that a proxy probing a restarted broker finds it serving within
// tens of milliseconds of /readyz, not up to half a second later.
const (
	healthPollServing    = 500 * time.Millisecond
	healthPollNotServing = 20 * time.Millisecond
)

func (s *Server) watchHealth() {
	defer s.wg.Done()
	t := time.NewTimer(healthPollNotServing)
	defer t.Stop()
	for {
		st, next := healthpb.HealthCheckResponse_NOT_SERVING, healthPollNotServing
		if s.Ready() {
			st, next = healthpb.HealthCheckResponse_SERVING, healthPollServing
		}
		s.health.SetServingStatus("", st)
		t.Reset(next)
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
	}
}

// KeepaliveMinTime is the shortest interval between a client's keepalive
// pings that the broker accepts (proxies ping every 5s).
const KeepaliveMinTime = 4 * time.Second

// Stop stops serving and closes everything; safe to call twice.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		close(s.stopc)
		if s.health != nil {
			s.health.Shutdown()
		}
		if s.grpc != nil {
			stopped := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(2 * time.Second):
				s.grpc.Stop()
			}
		}
		for _, srv := range []*http.Server{s.httpSrv, s.adminSrv} {
			if srv == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := srv.Shutdown(ctx); err != nil {
				// Requests still running (a pprof profile, say) are cut off.
				s.log.Warn("http server shutdown incomplete; closing its connections", zap.Error(err))
				srv.Close()
			}
			cancel()
		}
		s.wg.Wait()
		if s.healer != nil {
			s.healer.Stop()
		}
		if s.operator != nil {
			s.operator.Stop()
		}
		if s.backups != nil {
			s.backups.Stop()
		}
		// Every user of the peer connections has stopped: the gRPC
		// handlers, leader gossip (s.wg), the healer, the executor and the
		// backup runner.
		s.peers.Close()
		if s.host != nil {
			s.host.Stop()
		}
		s.log.Info("broker stopped")
	})
}

// Refusal is why the meta state refused this node after Start (its node id
// is registered with another data dir's incarnation, or the meta group is
// another cluster's), nil if it did not. A refused node runs no replicas.
func (s *Server) Refusal() error { return s.host.Refusal() }

// GRPCAddr is the address the broker serves gRPC on.
func (s *Server) GRPCAddr() string { return s.lis.Addr().String() }

// AdminAddr is the address of pprof and /debug/*, empty if disabled.
func (s *Server) AdminAddr() string {
	if s.adminLis == nil {
		return ""
	}
	return s.adminLis.Addr().String()
}

// MetricsAddr is the address of /metrics, empty if disabled.
func (s *Server) MetricsAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// TransferLeadership asks for shard's leadership to move to the broker
// toNode (it must hold a replica); it returns once the request is queued
// on this broker, which must lead the shard: a follower queues nothing and
// answers an error naming the leader.
func (s *Server) TransferLeadership(ctx context.Context, shard, toNode uint64) error {
	return s.host.Moves().TransferLeadership(ctx, shard, toNode)
}

// stepTimeouts are o's step timeouts with defaults for zero fields.
func stepTimeouts(o Operations) meta.StepTimeouts {
	t := meta.DefaultStepTimeouts()
	if o.StepTimeout > 0 {
		t.Step = o.StepTimeout
	}
	if o.CatchUpTimeout > 0 {
		t.CatchUp = o.CatchUpTimeout
	}
	return t
}

// ProposeMeta proposes c to the meta group and answers its result code
// and data; for tests and tools that change the metadata directly (such
// as registering a node no broker runs yet).
func (s *Server) ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error) {
	return s.host.MetaClient().ProposeMeta(ctx, c)
}

// serveStateHashes answers /debug/statehash: a JSON object from each hosted
// event shard's id to the hex StateHash of the local replica (or to
// "error: ..." when the replica cannot answer yet). The fault-injection
// tests compare it across brokers after quiescence (guarantee G7).
func (s *Server) serveStateHashes(w http.ResponseWriter, _ *http.Request) {
	out := map[string]string{}
	for _, id := range s.host.Replicas().HostedShards() {
		h, err := s.host.StateHash(id)
		if err != nil {
			out[strconv.FormatUint(id, 10)] = "error: " + err.Error()
			continue
		}
		out[strconv.FormatUint(id, 10)] = hex.EncodeToString(h)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// ShardStateHash is a hash of this broker's replica of shard: equal on
// every replica once they applied the same entries. Operators and tests use
// it to check that replicas agree.
func (s *Server) ShardStateHash(shard uint64) ([]byte, error) {
	return s.host.StateHash(shard)
}

// NodeID is the broker's node id: the configured one, or for a joining
// broker configured without one, the one the cluster assigned (after
// Start).
func (s *Server) NodeID() uint64 { return s.cfg.NodeID }
