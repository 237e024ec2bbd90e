package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/proc"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Config says what a Cluster starts. Zero fields take the defaults.
type Config struct {
	Brokers int // default 3
	Proxies int // default 1
	Shards  int // event shards at bootstrap; default 4
	// LogLevel of every process; default "info".
	LogLevel string
	// BrokerArgs are extra flags for every broker.
	BrokerArgs []string
	// ProxyArgs are extra flags for every proxy.
	ProxyArgs []string
	// StartTimeout bounds waiting for readiness; default 120 s.
	StartTimeout time.Duration
	// BrokerCAFile is the CA of the brokers' certificates when BrokerArgs
	// give them TLS files: their metrics ports then serve HTTPS, read
	// verifying against it (BrokerHTTP, MetricsURL). Empty: plaintext.
	BrokerCAFile string
	// ProxyToken is the bearer token secret every call of the framework
	// to a proxy carries (cluster operations, the cluster view), for
	// proxies started with --auth (ProxyArgs). Empty: none.
	ProxyToken string
}

func (c Config) withDefaults() Config {
	if c.Brokers <= 0 {
		c.Brokers = 3
	}
	if c.Proxies <= 0 {
		c.Proxies = 1
	}
	if c.Shards <= 0 {
		c.Shards = 4
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 120 * time.Second
	}
	return c
}

// Broker is one broker's addresses and process. Peers and proxies reach it
// only through its forwarders.
type Broker struct {
	ID                 int // node id, 1-based
	Name               string
	RaftAddr, GRPCAddr string // the forwarders': what peers and proxies dial
	raftListen         string // where Dragonboat listens
	grpcListen         string
	MetricsAddr        string
	AdminAddr          string // pprof and /debug/*
	DataDir            string
	raftFwd, grpcFwd   *Forwarder
	join               string   // --join of a broker added by Join; empty for the initial members
	extraArgs          []string // flags of this broker only (Join's args)
	proc               *proc.Process
}

// Proxy is one proxy's addresses and process.
type Proxy struct {
	Name               string
	GRPCAddr, HTTPAddr string
	proc               *proc.Process
}

// Cluster is a running cluster of broker and proxy processes.
type Cluster struct {
	t       testing.TB
	cfg     Config
	bin     Binaries
	dir     string
	members string
	seeds   string // the brokers' gRPC forwarders, for the proxies
	Brokers []*Broker
	Proxies []*Proxy

	mu       sync.Mutex // guards the fault state below and the processes of Brokers
	isolated map[int]bool
	parted   map[[2]int]bool // broker pairs, lower id first
	cutGRPC  map[int]bool    // proxies cannot reach this broker's gRPC
	slow     map[int]time.Duration
	joinArgs []string // flags of every Join's broker (SetJoinArgs)

	stopOnce sync.Once
}

// NewCluster starts cfg's brokers and proxies and waits until they are
// ready and a publish through the first proxy succeeds. Stop is registered
// with t.Cleanup; when t failed, the process logs are kept (keepLogs) and
// each one's tail is printed with the kept file's path.
func NewCluster(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	cfg = cfg.withDefaults()
	bin, err := EnsureBinaries()
	if err != nil {
		t.Fatalf("binaries: %v", err)
	}
	c := &Cluster{t: t, cfg: cfg, bin: bin, dir: t.TempDir(),
		isolated: map[int]bool{}, parted: map[[2]int]bool{}, cutGRPC: map[int]bool{}, slow: map[int]time.Duration{}}
	t.Cleanup(func() {
		c.Stop()
		if !t.Failed() {
			return
		}
		// The logs live in t.TempDir, removed when the test ends: keep
		// them (in SUNDIAL_KEEP_LOGS, else a KeepDir) before naming them.
		dir, err := os.Getenv("SUNDIAL_KEEP_LOGS"), error(nil)
		if dir == "" {
			dir, err = KeepDir(t)
		}
		if err == nil {
			err = c.keepLogs(dir)
		}
		if err != nil {
			t.Logf("keep logs: %v", err)
			dir = ""
		}
		t.Log(c.logTails(6000, dir))
	})
	var members, seeds []string
	for i := 1; i <= cfg.Brokers; i++ {
		b := &Broker{ID: i, Name: fmt.Sprintf("broker-%d", i), DataDir: filepath.Join(c.dir, fmt.Sprintf("broker-%d", i))}
		for _, a := range []*string{&b.RaftAddr, &b.GRPCAddr, &b.raftListen, &b.grpcListen, &b.MetricsAddr, &b.AdminAddr} {
			*a = MustFreeAddr(t)
		}
		if b.raftFwd, err = c.forwarder(b, "raft", b.RaftAddr, b.raftListen); err != nil {
			t.Fatal(err)
		}
		if b.grpcFwd, err = c.forwarder(b, "grpc", b.GRPCAddr, b.grpcListen); err != nil {
			t.Fatal(err)
		}
		members = append(members, fmt.Sprintf("%d=%s@%s", i, b.RaftAddr, b.GRPCAddr))
		seeds = append(seeds, b.GRPCAddr)
		c.Brokers = append(c.Brokers, b)
	}
	c.members = strings.Join(members, ",")
	for _, b := range c.Brokers {
		if err := c.startBroker(b); err != nil {
			t.Fatal(err)
		}
	}
	c.seeds = strings.Join(seeds, ",")
	for i := 1; i <= cfg.Proxies; i++ {
		p := &Proxy{Name: fmt.Sprintf("proxy-%d", i), GRPCAddr: MustFreeAddr(t), HTTPAddr: MustFreeAddr(t)}
		c.Proxies = append(c.Proxies, p)
		if err := c.startProxy(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(cfg.StartTimeout); err != nil {
		t.Fatalf("cluster not ready: %v", err)
	}
	return c
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.dir, "logs", name+".log") }

func (c *Cluster) forwarder(b *Broker, kind, listen, target string) (*Forwarder, error) {
	_, portText, _ := net.SplitHostPort(listen)
	port, _ := strconv.Atoi(portText)
	source := func(p int) string { return socketOwner(p, port, c.pids()) }
	route := func(from string) Route { return c.route(b.ID, kind, from) }
	return NewForwarder(b.Name+"-"+kind, listen, target, source, route)
}

func (c *Cluster) startBroker(b *Broker) error {
	p, err := proc.Start(b.Name, c.bin.Broker, c.logPath(b.Name), c.brokerArgs(b)...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	b.proc = p
	c.mu.Unlock()
	return nil
}

func (c *Cluster) startProxy(p *Proxy) error {
	pp, err := proc.Start(p.Name, c.bin.Proxy, c.logPath(p.Name),
		append([]string{"--grpc-addr", p.GRPCAddr, "--http-addr", p.HTTPAddr, "--admin-addr", "off", "--brokers", c.seeds, "--log-level", c.cfg.LogLevel}, c.cfg.ProxyArgs...)...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	p.proc = pp
	c.mu.Unlock()
	return nil
}

// KillProxy SIGKILLs proxy i (1-based); RestartProxy starts it again on
// the same addresses.
func (c *Cluster) KillProxy(i int) error {
	c.mu.Lock()
	p := c.Proxies[i-1].proc
	c.mu.Unlock()
	return p.Kill()
}

// RestartProxy starts proxy i again (killing it first if it runs),
// without waiting for readiness.
func (c *Cluster) RestartProxy(i int) error {
	if err := c.KillProxy(i); err != nil {
		return err
	}
	return c.startProxy(c.Proxies[i-1])
}

// ProxyRunning reports whether proxy i's process runs.
func (c *Cluster) ProxyRunning(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.Proxies[i-1].proc
	return p != nil && !p.Exited()
}

// pids maps the running processes' pids to their names.
func (c *Cluster) pids() map[int]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[int]string{}
	for _, b := range c.Brokers {
		if b.proc != nil && !b.proc.Exited() {
			m[b.proc.Pid()] = b.Name
		}
	}
	for _, p := range c.Proxies {
		if p.proc != nil && !p.proc.Exited() {
			m[p.proc.Pid()] = p.Name
		}
	}
	return m
}

// route decides a connection from process from to broker to's kind port.
func (c *Cluster) route(to int, kind, from string) Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	rt := Route{Delay: c.slow[to]}
	fromBroker := 0
	if n, ok := strings.CutPrefix(from, "broker-"); ok {
		fromBroker, _ = strconv.Atoi(n)
	}
	switch {
	case c.isolated[to], fromBroker != 0 && c.isolated[fromBroker]:
		rt.Drop = true
	case fromBroker != 0 && c.parted[pair(to, fromBroker)]:
		rt.Drop = true
	case kind == "grpc" && strings.HasPrefix(from, "proxy-") && c.cutGRPC[to]:
		rt.Drop = true
	}
	return rt
}

func pair(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

func (c *Cluster) reroute() {
	for _, b := range c.Brokers {
		b.raftFwd.Reroute()
		b.grpcFwd.Reroute()
	}
}

func (c *Cluster) broker(id int) *Broker {
	if id < 1 || id > len(c.Brokers) {
		c.t.Fatalf("no broker %d", id)
	}
	return c.Brokers[id-1]
}

// Kill SIGKILLs broker id.
func (c *Cluster) Kill(id int) error {
	c.mu.Lock()
	p := c.broker(id).proc
	c.mu.Unlock()
	return p.Kill()
}

// Restart starts broker id again on the same addresses and data (killing
// it first if it runs), without waiting for readiness.
func (c *Cluster) Restart(id int) error {
	b := c.broker(id)
	if err := c.Kill(id); err != nil {
		return err
	}
	return c.startBroker(b)
}

// Running reports whether broker id's process runs (paused or not).
func (c *Cluster) Running(id int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.broker(id).proc
	return p != nil && !p.Exited()
}

// Pause freezes broker id (SIGSTOP); Resume continues it.
func (c *Cluster) Pause(id int) error {
	c.mu.Lock()
	p := c.broker(id).proc
	c.mu.Unlock()
	return p.Pause()
}

// Resume continues broker id after Pause.
func (c *Cluster) Resume(id int) error {
	c.mu.Lock()
	p := c.broker(id).proc
	c.mu.Unlock()
	return p.Resume()
}

// Isolate cuts broker id from everyone: Raft and gRPC, both directions.
func (c *Cluster) Isolate(id int) {
	c.mu.Lock()
	c.isolated[id] = true
	c.mu.Unlock()
	c.reroute()
}

// Partition cuts the links between brokers a and b (Raft and gRPC, both
// directions); each still reaches everyone else.
func (c *Cluster) Partition(a, b int) {
	c.mu.Lock()
	c.parted[pair(a, b)] = true
	c.mu.Unlock()
	c.reroute()
}

// CutGRPC cuts every proxy's connections to broker id's gRPC port; its Raft
// links stay.
func (c *Cluster) CutGRPC(id int) {
	c.mu.Lock()
	c.cutGRPC[id] = true
	c.mu.Unlock()
	c.reroute()
}

// Slow delays every chunk of bytes sent to broker id by d.
func (c *Cluster) Slow(id int, d time.Duration) {
	c.mu.Lock()
	c.slow[id] = d
	c.mu.Unlock()
	c.reroute()
}

// Heal removes every network fault and resumes paused brokers. Killed
// brokers stay down (Restart them).
func (c *Cluster) Heal() {
	c.mu.Lock()
	c.isolated, c.parted, c.cutGRPC, c.slow = map[int]bool{}, map[[2]int]bool{}, map[int]bool{}, map[int]time.Duration{}
	procs := []*proc.Process{}
	for _, b := range c.Brokers {
		procs = append(procs, b.proc)
	}
	c.mu.Unlock()
	for _, p := range procs {
		_ = p.Resume()
	}
	c.reroute()
}

// ProxyAddrs are the proxies' gRPC addresses.
func (c *Cluster) ProxyAddrs() []string {
	out := make([]string, len(c.Proxies))
	for i, p := range c.Proxies {
		out[i] = p.GRPCAddr
	}
	return out
}

// WaitReady waits until every running broker and every proxy answers its
// readiness endpoint (/readyz, or /healthz on builds without it), and a
// ClusterInfo through the first proxy shows a leader for every shard.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, b := range c.Brokers {
		if !c.Running(b.ID) {
			continue
		}
		if err := c.pollProc(deadline, b.proc, c.MetricsURL(b)); err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
	}
	for _, p := range c.Proxies {
		c.mu.Lock()
		pp := p.proc
		c.mu.Unlock()
		if err := c.pollProcWith(http.DefaultClient, deadline, pp, "http://"+p.HTTPAddr); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	return proc.Poll(time.Until(deadline), func() error {
		info, err := c.ClusterInfo()
		if err != nil {
			return err
		}
		if len(info.GetShards()) < c.cfg.Shards {
			return fmt.Errorf("%d shards known, want %d", len(info.GetShards()), c.cfg.Shards)
		}
		for _, s := range info.GetShards() {
			if s.GetLeaderNodeId() == 0 {
				return fmt.Errorf("shard %d has no leader", s.GetShardId())
			}
		}
		return nil
	})
}

// pollProc waits until the broker at base (MetricsURL) is ready.
func (c *Cluster) pollProc(deadline time.Time, p *proc.Process, base string) error {
	hc, err := c.BrokerHTTP()
	if err != nil {
		return err
	}
	return c.pollProcWith(hc, deadline, p, base)
}

func (c *Cluster) pollProcWith(hc *http.Client, deadline time.Time, p *proc.Process, base string) error {
	return proc.Poll(time.Until(deadline), func() error {
		if p.Exited() {
			return fmt.Errorf("exited; log tail:\n%s", p.Tail(3000))
		}
		return readyHTTP(hc, base)
	})
}

// MetricsURL is the base URL of broker b's metrics port: https:// with
// Config.BrokerCAFile, else http://.
func (c *Cluster) MetricsURL(b *Broker) string {
	if c.cfg.BrokerCAFile != "" {
		return "https://" + b.MetricsAddr
	}
	return "http://" + b.MetricsAddr
}

// BrokerHTTP is a client of the brokers' metrics ports: it verifies their
// certificates against Config.BrokerCAFile when set.
func (c *Cluster) BrokerHTTP() (*http.Client, error) {
	if c.cfg.BrokerCAFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(c.cfg.BrokerCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("framework: no certificate in %s", c.cfg.BrokerCAFile)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

func readyHTTP(hc *http.Client, base string) error {
	var last error
	for _, path := range []string{"/readyz", "/healthz"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := hc.Do(req)
		cancel()
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("GET %s%s: %d", base, path, resp.StatusCode)
	}
	return last
}

// DialProxy is a connection to the proxy at addr (plaintext), whose calls
// carry Config.ProxyToken.
func (c *Cluster) DialProxy(addr string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if c.cfg.ProxyToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.TokenCredentials(c.cfg.ProxyToken)))
	}
	return grpc.NewClient(addr, opts...)
}

// ClusterInfo asks the first proxy for the cluster view.
func (c *Cluster) ClusterInfo() (*sundialv1.ClusterInfo, error) {
	return c.clusterInfo(context.Background())
}

func (c *Cluster) clusterInfo(ctx context.Context) (*sundialv1.ClusterInfo, error) {
	conn, err := c.DialProxy(c.Proxies[0].GRPCAddr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
}

// LeaderOf is the node id leading shard, 0 when unknown.
func (c *Cluster) LeaderOf(shard uint64) (int, error) {
	info, err := c.ClusterInfo()
	if err != nil {
		return 0, err
	}
	for _, s := range info.GetShards() {
		if s.GetShardId() == shard {
			return int(s.GetLeaderNodeId()), nil
		}
	}
	return 0, fmt.Errorf("no shard %d", shard)
}

// Stop stops every process by pid and closes the forwarders.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		var errs []error
		for _, p := range c.Proxies {
			if p.proc != nil {
				errs = append(errs, p.proc.Stop())
			}
		}
		for _, b := range c.Brokers {
			if b.proc != nil {
				errs = append(errs, b.proc.Stop())
			}
			b.raftFwd.Close()
			b.grpcFwd.Close()
		}
		if err := errors.Join(errs...); err != nil {
			c.t.Logf("stop: %v", err)
		}
	})
}

// keepLogs copies every process log of a failed test into dir (made if
// missing), for a run whose temporary dir is removed at its end:
// SUNDIAL_KEEP_LOGS names it (make chaos sets data/chaos/logs-<seed>),
// else a KeepDir.
func (c *Cluster) keepLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(c.dir, "logs"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.dir, "logs", e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	c.t.Logf("process logs kept in %s", dir)
	return nil
}

// logTails returns the last n bytes of every process log, naming each log
// by its copy in kept (see keepLogs) when kept is set, else by its path
// under the test's temporary dir.
func (c *Cluster) logTails(n int, kept string) string {
	var names []string
	for _, b := range c.Brokers {
		names = append(names, b.Name)
	}
	for _, p := range c.Proxies {
		names = append(names, p.Name)
	}
	var sb strings.Builder
	for _, name := range names {
		path := c.logPath(name)
		if kept != "" {
			path = filepath.Join(kept, name+".log")
		}
		fmt.Fprintf(&sb, "--- %s (%s):\n%s\n", name, path, tail(c.logPath(name), n))
	}
	return sb.String()
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// ShardIDs are the event shards' ids, in the cluster view's order.
func (c *Cluster) ShardIDs(ctx context.Context) ([]uint64, error) {
	info, err := c.clusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, s := range info.GetShards() {
		ids = append(ids, s.GetShardId())
	}
	return ids, nil
}

// StateHashes reads /debug/statehash of every running broker: shard id ->
// broker id -> hash. A broker that cannot answer is left out.
func (c *Cluster) StateHashes() map[string]map[int]string {
	out := map[string]map[int]string{}
	for _, b := range c.Brokers {
		if !c.Running(b.ID) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.AdminAddr+"/debug/statehash", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			continue
		}
		var hashes map[string]string
		err = json.NewDecoder(resp.Body).Decode(&hashes)
		resp.Body.Close()
		cancel()
		if err != nil {
			continue
		}
		for shard, h := range hashes {
			if out[shard] == nil {
				out[shard] = map[int]string{}
			}
			out[shard][b.ID] = h
		}
	}
	return out
}

// ReplicasAgree reports nil when every shard's replicas answer one state
// hash, else which shard differs.
func (c *Cluster) ReplicasAgree() error {
	hashes := c.StateHashes()
	if len(hashes) == 0 {
		return errors.New("no broker answered /debug/statehash")
	}
	shards := make([]string, 0, len(hashes))
	for s := range hashes {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, s := range shards {
		var first string
		for id, h := range hashes[s] {
			if strings.HasPrefix(h, "error") {
				return fmt.Errorf("shard %s on broker-%d: %s", s, id, h)
			}
			if first == "" {
				first = h
			} else if h != first {
				return fmt.Errorf("shard %s: replicas differ: %v", s, hashes[s])
			}
		}
	}
	return nil
}
