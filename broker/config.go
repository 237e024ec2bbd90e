package broker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sundialmq/sundial/broker/internal/join"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/validate"
)

// Member is one initial member of the cluster.
type Member struct {
	RaftAddr string `yaml:"raft_addr"`
	GRPCAddr string `yaml:"grpc_addr"`
}

// Config is a broker's whole configuration.
type Config struct {
	// NodeID names this broker in the cluster; it must be in InitialMembers,
	// unless the broker joins (Join), where 0 asks the cluster for a free
	// id (kept in the data dir's identity file from then on).
	NodeID uint64 `yaml:"node_id"`
	// GRPCAddr is where the broker listens for proxies, peers and admin
	// tools. Default 127.0.0.1:7501. Port 0 picks a free port.
	GRPCAddr string `yaml:"grpc_addr"`
	// AdvertiseAddr is the gRPC address others reach this broker at.
	// Default: the address GRPCAddr listens on.
	AdvertiseAddr string `yaml:"advertise_addr"`
	// RaftAddr is the Raft address peers dial (this node's initial member
	// address); Dragonboat also listens on it unless RaftListenAddr is set.
	// Default 127.0.0.1:7601.
	RaftAddr string `yaml:"raft_addr"`
	// RaftListenAddr, when set, is where Dragonboat listens while peers keep
	// dialling RaftAddr: for a NAT, a load balancer or a TCP proxy in front
	// of the port (the fault-injection tests put one there). Default empty:
	// listen on RaftAddr.
	RaftListenAddr string `yaml:"raft_listen_addr"`
	// MetricsAddr serves /metrics, /livez, /readyz and /healthz (an alias
	// of /readyz) over HTTP, or HTTPS with the TLS files when they are set
	// (no client certificate asked for); empty disables.
	// Default 127.0.0.1:7701.
	MetricsAddr string `yaml:"metrics_addr"`
	// AdminAddr serves the debug endpoints over plaintext HTTP: pprof
	// (/debug/pprof/...), /debug/pebble and /debug/statehash, apart from
	// the metrics port so that only the operator reaches them (a
	// stranger's CPU profile blocks the operator's): keep it on loopback;
	// like every plaintext listener it is refused elsewhere unless
	// Insecure. Empty disables it. Default 127.0.0.1:7801.
	AdminAddr string `yaml:"admin_addr"`
	// DataDir holds the Raft logs and the state DB. Default ./data/broker-1.
	DataDir string `yaml:"data_dir"`
	// InitialMembers are the brokers that bootstrap the cluster and vote in
	// the meta group, by node id.
	InitialMembers map[uint64]Member `yaml:"initial_members"`
	// With neither InitialMembers nor Join the broker starts in the waiting
	// state: it serves only health and Peer.AddToCluster until shardctl
	// add-node adds it to a cluster, as if it had been started with Join.
	//
	// Join lists gRPC addresses of brokers of a running cluster (host:port,
	// or dns+srv://NAME for the targets of NAME's SRV records). A broker
	// with Join and no InitialMembers joins that cluster through
	// Cluster.JoinCluster on its first start, as a non-voting member of
	// the meta group with no event-shard replicas until a rebalance; on
	// later starts it finds its identity in the data dir and only checks
	// with those brokers that it is still the same cluster. Default empty.
	Join []string `yaml:"join"`
	// JoinTimeout bounds the first start's join: the brokers in Join are
	// asked in turn until one registers this broker or it runs out.
	// Default 1m.
	JoinTimeout time.Duration `yaml:"join_timeout"`
	// JoinTokenFile holds the join token (shardctl join-token create
	// prints it) a joining broker presents with its first join (Join, or
	// the add of a waiting broker when shardctl add-node gives none). A
	// cluster serving TLS, or insecure, admits no join without a valid
	// one; a plaintext loopback cluster admits a join without one. Read
	// once, at the join; surrounding white space is ignored. Default
	// empty: no token.
	JoinTokenFile string `yaml:"join_token_file"`
	// Labels are this broker's location labels (zone=a, rack=r1), stored on
	// its meta node record when it registers or joins; the planner spreads
	// a shard's replicas over the values of "zone". Keys are lower-case
	// letters, digits, '-', '_' and '.'; see validate.Labels. Default none.
	Labels map[string]string `yaml:"labels"`
	// Shards is the number of event shards created at bootstrap. Default 8.
	Shards int `yaml:"shards"`
	// ReplicationFactor of event shards; 0 means min(3, initial members).
	ReplicationFactor int `yaml:"replication_factor"`
	// RTT is Dragonboat's tick. Default 20ms.
	RTT time.Duration `yaml:"rtt"`
	// ElectionRTT is the election timeout in ticks. Default 15.
	ElectionRTT uint64 `yaml:"election_rtt"`
	// HeartbeatRTT is the heartbeat interval in ticks. Default 5 (100 ms):
	// heartbeats of every shard are most of an idle broker's CPU.
	HeartbeatRTT uint64 `yaml:"heartbeat_rtt"`
	// SnapshotEntries is the number of Raft entries between a shard's
	// snapshots. The state machine is on disk, so a snapshot costs a sync
	// and a small record, not a copy of the state; a restarted replica
	// re-reads the entries after its last snapshot from the Raft log (up to
	// this many per shard, and a bulk publish's entries hold ~100 messages
	// each). Default 1000.
	SnapshotEntries uint64 `yaml:"snapshot_entries"`
	// RaftLogKeepEntries is how many entries a shard's Raft log keeps behind
	// its latest snapshot, so a replica that fell up to this far behind (a
	// restart, a pause) catches up from the log instead of receiving a copy
	// of the whole shard; 0 means half of SnapshotEntries. Default 5000.
	RaftLogKeepEntries uint64 `yaml:"raft_log_keep_entries"`
	// AutoCreateTopics creates a topic on its first publish. Default true.
	AutoCreateTopics bool `yaml:"auto_create_topics"`
	// MaxMessageBytes is the largest payload accepted. Default 1 MiB.
	MaxMessageBytes int64 `yaml:"max_message_bytes"`
	// MaxDelay is the furthest in the future a message may be due. Default 366 days.
	MaxDelay time.Duration `yaml:"max_delay"`
	// VisibilityTimeout is the default lease of a delivery. Default 30s.
	VisibilityTimeout time.Duration `yaml:"visibility_timeout"`
	// MaxAttempts is the default delivery attempts of a topic. Default 10.
	MaxAttempts int32 `yaml:"max_attempts"`
	// Retention is the default retention_ms of a new topic: how long a
	// message may stay once due (undelivered, or delivered and never
	// acked) before it is dropped like an expired TTL. 0 keeps messages
	// until they are completed. Default 0: retention costs an expiry index
	// entry per message, so topics opt in.
	Retention time.Duration `yaml:"retention"`
	// DedupWindow is how long publish, cancel and reschedule request ids
	// are remembered (the dispatcher's sweep forgets older ones), so a
	// request retried within it is answered once; it is also the default
	// dedup window of a new topic's keys. Default 10m.
	DedupWindow time.Duration `yaml:"dedup_window"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`
	// RaftWorkers is the number of Dragonboat's step, commit and apply
	// workers. Each step worker writes the Raft logs of its shards in one
	// fsynced batch, so fewer workers mean fewer fsyncs per proposal at the
	// cost of parallelism. Fixed when the data dir is created. Default 2.
	RaftWorkers uint64 `yaml:"raft_workers"`
	// CacheBytes is the state DB's block cache. Default 16 MiB.
	CacheBytes int64 `yaml:"cache_bytes"`
	// MemTableBytes is the size of one state DB memtable; up to two are in
	// memory (one filling, one flushing). Default 16 MiB.
	MemTableBytes uint64 `yaml:"memtable_bytes"`
	// GoMemoryLimit is the Go runtime's soft memory limit for the broker
	// process (Pebble's cache and memtables are outside it): the collector
	// runs more often and returns idle heap to the OS as the Go heap nears
	// it. Ignored when the GOMEMLIMIT variable is set; 0 disables.
	// Default 96 MiB.
	GoMemoryLimit int64 `yaml:"go_memory_limit"`
	// MallocArenas caps the C allocator's arenas (glibc's M_ARENA_MAX),
	// which hold the state DB's block cache and memtables and the Raft
	// log's: with one arena per thread the freed blocks each arena keeps
	// grew a broker's RSS by tens of MiB over a long fill. Ignored when the
	// MALLOC_ARENA_MAX or GLIBC_TUNABLES variable is set and on builds
	// without cgo; 0 leaves the C library's default. Default 2.
	MallocArenas int `yaml:"malloc_arenas"`
	// RaftLogShards is the number of Raft log stores (each its own WAL and
	// fsync). Fixed when the data dir is created. Default 1.
	RaftLogShards uint64 `yaml:"raft_log_shards"`
	// DeadNodeTimeout is how long the meta leader waits without a sign of a
	// registered node (its Peer.Identify unanswered) before it declares the
	// node dead and re-creates its replicas on live nodes. A new meta leader
	// starts its clocks fresh, so a node is never declared dead sooner than
	// this after the leader took over. Default 5m.
	DeadNodeTimeout time.Duration `yaml:"dead_node_timeout"`
	// SuspectNodeTimeout is how long the meta leader goes without a sign
	// of a node before its plans (rebalance, drain, repairs) stop choosing
	// it as a target: such a suspect node keeps its replicas and still
	// counts for quorum, but nothing moves onto or off it until it answers
	// again or is declared dead. Default 3s (three probe rounds).
	SuspectNodeTimeout time.Duration `yaml:"suspect_node_timeout"`
	// Operations tunes the executor of cluster operations (replica moves,
	// leadership transfers) and the step timeouts Rebalance plans with.
	Operations Operations `yaml:"operations"`

	// Transport security (see docs/security.md).

	// Insecure lets the broker serve without TLS on non-loopback addresses;
	// without it a GRPCAddr, Raft listen address (RaftListenAddr, else
	// RaftAddr) or MetricsAddr that is not loopback (127.0.0.1, ::1,
	// localhost) is refused at start. The broker logs a warning at start
	// and shows it in /readyz's body. Default false.
	Insecure bool `yaml:"insecure"`
	// TLSCertFile and TLSKeyFile are this broker's certificate (PEM, signed
	// by the cluster CA, naming its gRPC and Raft hosts in its SANs) and
	// key: its gRPC listener serves TLS with them and its calls to other
	// brokers present them (reloaded when they change), and the Raft
	// transport uses mutual TLS with them and TLSCAFile (read only at
	// start: rotate by a rolling restart). Set both or neither. Default
	// empty: plaintext gRPC and Raft.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
	// TLSCAFile is the cluster CA (PEM): the gRPC listener accepts only
	// clients (proxies, brokers, shardctl) presenting a certificate it
	// signed, and calls to other brokers verify theirs against it. Required
	// with TLSCertFile; reloaded when it changes. Default empty.
	TLSCAFile string `yaml:"tls_ca_file"`
	// TLSRaftCAFile is the CA (PEM) the Raft transport trusts instead of
	// TLSCAFile: an intermediate that signs broker certificates only, so a
	// proxy's or an operator's certificate of the cluster CA cannot send
	// Raft messages (docs/security.md says how to issue it). Read at start,
	// like the rest of the Raft transport's files. Default empty: TLSCAFile.
	TLSRaftCAFile string `yaml:"tls_raft_ca_file"`

	// BackupCredentialsFile names a file with the S3 credentials this
	// broker uses for s3:// backup destinations (an AWS shared-credentials
	// file: a [default] section with aws_access_key_id and
	// aws_secret_access_key); read at each use. Default empty: the
	// environment's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Backups
	// spool each shard's capture in <data_dir>/backup-spool before its
	// upload.
	BackupCredentialsFile string `yaml:"backup_credentials_file"`

	// Testing holds hooks for tests; never set from a config file.
	Testing Testing `yaml:"-"`
}

// Operations tunes cluster operations. Zero fields take their defaults.
type Operations struct {
	// MaxRunning caps the replica and leadership operations the meta
	// leader runs at once, and apart from them the topic and group
	// operations (DeleteTopic, CreateGroup, DeleteGroup). Default 4.
	MaxRunning int `yaml:"max_running"`
	// StepTimeout bounds one attempt of a step (a membership change, a
	// leadership transfer, a topic or group change on one shard). Default
	// 30s.
	StepTimeout time.Duration `yaml:"step_timeout"`
	// CatchUpTimeout bounds the wait for a new replica to catch up; the
	// move rolls back after it. Default 10m.
	CatchUpTimeout time.Duration `yaml:"catch_up_timeout"`
}

// Testing holds hooks that let tests make faults deterministic.
type Testing struct {
	// HoldMeta keeps the broker's cached meta state (what it stamps
	// publishes with unless it reads meta linearizably, and the routing
	// table it streams to proxies) at its current version while it answers
	// true, as if its meta replica lagged. nil never holds.
	HoldMeta func() bool
	// SweepInterval, if set, replaces the dispatchers' one-minute interval
	// between sweeps of expired dedup, key and end records, so a test sees
	// a shard forget a key (and a hand-over seal) sooner.
	SweepInterval time.Duration
}

// DefaultConfig is a single-node broker on the local ports.
func DefaultConfig() Config {
	return Config{
		NodeID:             1,
		GRPCAddr:           "127.0.0.1:7501",
		RaftAddr:           "127.0.0.1:7601",
		MetricsAddr:        "127.0.0.1:7701",
		AdminAddr:          "127.0.0.1:7801",
		DataDir:            "./data/broker-1",
		InitialMembers:     map[uint64]Member{1: {RaftAddr: "127.0.0.1:7601", GRPCAddr: "127.0.0.1:7501"}},
		Shards:             8,
		RTT:                20 * time.Millisecond,
		ElectionRTT:        15,
		HeartbeatRTT:       5,
		SnapshotEntries:    1000,
		RaftLogKeepEntries: 5000,
		AutoCreateTopics:   true,
		MaxMessageBytes:    validate.DefaultLimits().MaxMessageBytes,
		MaxDelay:           validate.DefaultLimits().MaxDelay,
		VisibilityTimeout:  30 * time.Second,
		MaxAttempts:        10,
		DedupWindow:        10 * time.Minute,
		LogLevel:           "info",
		RaftWorkers:        2,
		RaftLogShards:      1,
		CacheBytes:         16 << 20,
		MemTableBytes:      16 << 20,
		GoMemoryLimit:      96 << 20,
		MallocArenas:       2,
		JoinTimeout:        time.Minute,
		DeadNodeTimeout:    5 * time.Minute,
		SuspectNodeTimeout: 3 * time.Second,
		Operations:         Operations{MaxRunning: 4, StepTimeout: 30 * time.Second, CatchUpTimeout: 10 * time.Minute},
	}
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.NodeID == 0 && len(c.Join) == 0 && len(c.InitialMembers) > 0 {
		bad("node_id", "must be at least 1 (0, to be given a free id, only with join or in the waiting state)")
	}
	switch _, ok := c.InitialMembers[c.NodeID]; {
	case len(c.Join) > 0 && len(c.InitialMembers) > 0:
		bad("join", "excludes initial_members: a joining broker learns the members from the cluster it joins")
	case len(c.Join) == 0 && len(c.InitialMembers) > 0 && !ok && c.NodeID != 0:
		bad("initial_members", "must include this node (%d); to add it to a running cluster, set join to brokers of that cluster instead", c.NodeID)
	}
	for _, spec := range c.Join {
		if err := join.Parse(spec); err != nil {
			bad("join", "%v", err)
		}
	}
	for _, v := range validate.Labels("labels", c.Labels) {
		bad(v.Field, "%s", v.Description)
	}
	if len(c.Join) > 0 && c.JoinTimeout <= 0 {
		bad("join_timeout", "must be positive")
	}
	if c.JoinTokenFile != "" && len(c.InitialMembers) > 0 {
		bad("join_token_file", "only a joining or waiting broker presents a join token; an initial member does not join")
	}
	for id, m := range c.InitialMembers {
		if id == 0 {
			bad("initial_members", "node ids start at 1")
		}
		if !hostPort(m.RaftAddr) || !hostPort(m.GRPCAddr) {
			bad("initial_members", "node %d needs raft and grpc addresses as host:port", id)
		}
	}
	if !hostPort(c.GRPCAddr) {
		bad("grpc_addr", "%q is not host:port", c.GRPCAddr)
	}
	if !hostPort(c.RaftAddr) {
		bad("raft_addr", "%q is not host:port", c.RaftAddr)
	}
	if c.RaftListenAddr != "" && !hostPort(c.RaftListenAddr) {
		bad("raft_listen_addr", "%q is not host:port", c.RaftListenAddr)
	}
	if m, ok := c.InitialMembers[c.NodeID]; ok && m.RaftAddr != c.RaftAddr {
		bad("raft_addr", "%q differs from this node's initial member address %q", c.RaftAddr, m.RaftAddr)
	}
	if c.MetricsAddr != "" && !hostPort(c.MetricsAddr) {
		bad("metrics_addr", "%q is not host:port", c.MetricsAddr)
	}
	if c.AdminAddr != "" && !hostPort(c.AdminAddr) {
		bad("admin_addr", "%q is not host:port", c.AdminAddr)
	}
	raftListen := tlsfiles.Listener{Setting: "raft_addr", Addr: c.RaftAddr}
	if c.RaftListenAddr != "" {
		raftListen = tlsfiles.Listener{Setting: "raft_listen_addr", Addr: c.RaftListenAddr}
	}
	if err := c.tlsFiles().Check("tls"); err != nil {
		errs = append(errs, err)
	}
	if c.TLSCertFile != "" && c.TLSCAFile == "" {
		bad("tls_ca_file", "must be set with tls_cert_file: the gRPC listener accepts only clients with a certificate of the cluster CA")
	}
	if c.TLSCAFile != "" && c.TLSCertFile == "" {
		bad("tls_cert_file", "must be set with tls_ca_file: the gRPC listener serves TLS with it")
	}
	if c.TLSRaftCAFile != "" && c.TLSCertFile == "" {
		bad("tls_raft_ca_file", "needs tls_cert_file: the Raft transport uses mutual TLS only with a certificate")
	}
	grpcListen := tlsfiles.Listener{Setting: "grpc_addr", Addr: c.GRPCAddr}
	metricsListen := tlsfiles.Listener{Setting: "metrics_addr", Addr: c.MetricsAddr}
	if c.TLSCertFile != "" {
		grpcListen.Addr, raftListen.Addr, metricsListen.Addr = "", "", "" // served with TLS
	}
	// The admin listener is plaintext even with TLS on.
	if err := tlsfiles.RequireLoopback(c.Insecure, grpcListen, raftListen, metricsListen, tlsfiles.Listener{Setting: "admin_addr", Addr: c.AdminAddr}); err != nil {
		errs = append(errs, err)
	}
	if c.DataDir == "" {
		bad("data_dir", "must be set")
	}
	if c.Shards < 1 || c.Shards > 4096 {
		bad("shards", "must be between 1 and 4096")
	}
	if c.ReplicationFactor < 0 || c.ReplicationFactor > len(c.InitialMembers) {
		bad("replication_factor", "must be between 0 (automatic) and the number of initial members")
	}
	if c.RTT < time.Millisecond || c.ElectionRTT < 5 || c.HeartbeatRTT < 1 || c.ElectionRTT <= 2*c.HeartbeatRTT {
		bad("rtt", "needs rtt >= 1ms, election_rtt >= 5 and election_rtt > 2*heartbeat_rtt >= 2")
	}
	if c.MaxMessageBytes < 1 || c.MaxDelay <= 0 || c.VisibilityTimeout < time.Second || c.MaxAttempts < 1 || c.DedupWindow <= 0 {
		bad("limits", "max_message_bytes, max_delay, visibility_timeout (>= 1s), max_attempts and dedup_window must be positive")
	}
	if c.Retention < 0 {
		bad("retention", "must not be negative (0 keeps messages until completed)")
	}
	if c.Operations.MaxRunning < 0 || c.Operations.StepTimeout < 0 || c.Operations.CatchUpTimeout < 0 {
		bad("operations", "max_running, step_timeout and catch_up_timeout must not be negative (0 takes the default)")
	}
	if c.DeadNodeTimeout <= 0 {
		bad("dead_node_timeout", "must be positive (how long a node may be unreachable before its replicas are re-created elsewhere), got %v", c.DeadNodeTimeout)
	}
	if c.SuspectNodeTimeout <= 0 {
		bad("suspect_node_timeout", "must be positive (how long a node may be unreachable before plans stop moving replicas onto it), got %v", c.SuspectNodeTimeout)
	}
	if c.RaftWorkers < 1 || c.RaftWorkers > 64 {
		bad("raft_workers", "must be between 1 and 64")
	}
	if c.RaftLogShards < 1 || c.RaftLogShards > 64 {
		bad("raft_log_shards", "must be between 1 and 64")
	}
	if c.GoMemoryLimit != 0 && c.GoMemoryLimit < 32<<20 {
		bad("go_memory_limit", "must be 0 (no limit) or at least 32 MiB")
	}
	if c.MallocArenas < 0 || c.MallocArenas > 64 {
		bad("malloc_arenas", "must be between 0 (the C library's default) and 64")
	}
	if c.CacheBytes < 1<<20 {
		bad("cache_bytes", "must be at least 1 MiB")
	}
	if c.MemTableBytes < 1<<20 {
		bad("memtable_bytes", "must be at least 1 MiB")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	return errors.Join(errs...)
}

func hostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 0 && p < 65536
}

// ParseMembers parses "1=raft@grpc,2=raft@grpc".
func ParseMembers(s string) (map[uint64]Member, error) {
	out := map[uint64]Member{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		idText, addrs, ok := strings.Cut(part, "=")
		raft, grpc, ok2 := strings.Cut(addrs, "@")
		id, err := strconv.ParseUint(idText, 10, 64)
		if !ok || !ok2 || err != nil || id == 0 {
			return nil, fmt.Errorf("initial member %q: want ID=RAFT_HOST:PORT@GRPC_HOST:PORT", part)
		}
		out[id] = Member{RaftAddr: raft, GRPCAddr: grpc}
	}
	return out, nil
}
