// Package cluster starts a local Sundial cluster as processes: N brokers
// (replication factor min(3, N), S event shards) and one proxy, on free
// loopback ports, from the sundial-broker and sundial-proxy binaries. It is
// how loadtest measures Sundial the way a user runs it, without importing
// the broker module (and so without dragonboat or pebble).
//
// A Cluster is used from one goroutine at a time; its processes are stopped
// by pid in Stop. Ports are fixed at Start, so a restarted broker comes back
// on the same addresses with the same data directory.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sundialmq/sundial/proc"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/devca"
)

// Config says what to start. Zero fields take the defaults.
type Config struct {
	// Brokers is the number of broker processes; default 3.
	Brokers int
	// Shards is the number of event shards at bootstrap; default 8.
	Shards int
	// BinDir holds sundial-broker and sundial-proxy; missing binaries are
	// built there with go build from the repository root. Default: <root>/bin.
	BinDir string
	// DataDir holds broker-N/ directories and logs/; default a new temp dir
	// (removed by Stop unless KeepData).
	DataDir  string
	KeepData bool
	// LogLevel of every process; default "warn".
	LogLevel string
	// StartTimeout bounds waiting for every /healthz; default 90s.
	StartTimeout time.Duration
	// TLS runs every hop over TLS with certificates of a CA made in
	// <DataDir>/tls (package devca): clients → proxy (gRPC and HTTP),
	// proxy → brokers, brokers → brokers and the Raft transport's mutual
	// TLS. Clients verify the proxy with ClientTLS.
	TLS bool
	// Auth turns the proxy's authentication on with a bootstrap admin
	// token made for the run (<DataDir>/admin.token), which clients send
	// (Token): every call is authenticated and authorized, receipts are
	// signed and verified.
	Auth bool
}

func (c Config) withDefaults() Config {
	if c.Brokers <= 0 {
		c.Brokers = 3
	}
	if c.Shards <= 0 {
		c.Shards = 8
	}
	if c.LogLevel == "" {
		c.LogLevel = "warn"
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 90 * time.Second
	}
	return c
}

// NodeID is a broker's node id (1-based).
type NodeID int

type broker struct {
	id                              NodeID
	raft, grpc, metrics, admin, dir string
	tls                             []string // the broker's TLS flags (Config.TLS)
	proc                            *proc.Process
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg        Config
	bin        string
	members    string
	brokers    []*broker
	proxy      *proc.Process
	proxyGRPC  string
	proxyHTTP  string
	proxyAdmin string // the proxy's admin listener (pprof)
	tempData   bool
	// clientTLS is what clients verify the proxy with (Config.TLS), and
	// https the client for the proxy's HTTP port; nil without TLS.
	clientTLS *tlsfiles.Files
	token     string // the admin token's secret (Config.Auth)
	https     *http.Client
}

// RepoRoot walks up from the working directory to the directory holding
// go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for range 64 {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("cluster: no go.work above the working directory")
}

// EnsureBinaries returns the bin dir holding sundial-broker and
// sundial-proxy, building whichever is missing (or all when rebuild).
func EnsureBinaries(ctx context.Context, binDir string, rebuild bool) (string, error) {
	root, rootErr := RepoRoot()
	if binDir == "" {
		if rootErr != nil {
			return "", rootErr
		}
		binDir = filepath.Join(root, "bin")
	}
	var missing []string
	for name, pkg := range map[string]string{"sundial-broker": "./broker/cmd/sundial-broker", "sundial-proxy": "./proxy/cmd/sundial-proxy"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil || rebuild {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return binDir, nil
	}
	if rootErr != nil {
		return "", fmt.Errorf("cluster: %s lacks the binaries and they cannot be built: %w", binDir, rootErr)
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", err
	}
	args := append([]string{"build", "-o", binDir + string(filepath.Separator)}, missing...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return binDir, nil
}

// Start builds missing binaries, starts the brokers and the proxy, and
// waits until every /healthz answers 200.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	bin, err := EnsureBinaries(ctx, cfg.BinDir, false)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, bin: bin}
	if cfg.DataDir == "" {
		d, err := os.MkdirTemp("", "sundial-loadtest-")
		if err != nil {
			return nil, err
		}
		c.cfg.DataDir, c.tempData = d, true
	}
	var members, grpcs []string
	for i := 1; i <= cfg.Brokers; i++ {
		b := &broker{id: NodeID(i), dir: filepath.Join(c.cfg.DataDir, fmt.Sprintf("broker-%d", i))}
		for _, a := range []*string{&b.raft, &b.grpc, &b.metrics, &b.admin} {
			if *a, err = proc.FreeAddr(); err != nil {
				return nil, err
			}
		}
		members = append(members, fmt.Sprintf("%d=%s@%s", i, b.raft, b.grpc))
		grpcs = append(grpcs, b.grpc)
		c.brokers = append(c.brokers, b)
	}
	c.members = strings.Join(members, ",")
	if c.proxyGRPC, err = proc.FreeAddr(); err != nil {
		return nil, err
	}
	if c.proxyHTTP, err = proc.FreeAddr(); err != nil {
		return nil, err
	}
	if c.proxyAdmin, err = proc.FreeAddr(); err != nil {
		return nil, err
	}
	var proxyTLS []string
	if cfg.TLS {
		if proxyTLS, err = c.issueTLS(); err != nil {
			return nil, err
		}
	}
	if cfg.Auth {
		path, err := c.makeToken()
		if err != nil {
			return nil, err
		}
		proxyTLS = append(proxyTLS, "--auth", "--bootstrap-token-file", path)
	}
	for _, b := range c.brokers {
		if err := c.startBroker(b); err != nil {
			return nil, errors.Join(err, c.Stop())
		}
	}
	c.proxy, err = proc.Start("proxy", filepath.Join(bin, "sundial-proxy"), filepath.Join(c.cfg.DataDir, "logs", "proxy.log"),
		append([]string{"--grpc-addr", c.proxyGRPC, "--http-addr", c.proxyHTTP, "--admin-addr", c.proxyAdmin,
			"--brokers", strings.Join(grpcs, ","), "--log-level", cfg.LogLevel}, proxyTLS...)...)
	if err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) startBroker(b *broker) error {
	p, err := proc.Start(fmt.Sprintf("broker-%d", b.id), filepath.Join(c.bin, "sundial-broker"),
		filepath.Join(c.cfg.DataDir, "logs", fmt.Sprintf("broker-%d.log", b.id)),
		append([]string{"--node-id", fmt.Sprint(b.id), "--raft-addr", b.raft, "--grpc-addr", b.grpc, "--metrics-addr", b.metrics, "--admin-addr", b.admin,
			"--data-dir", b.dir, "--initial-members", c.members, "--shards", fmt.Sprint(c.cfg.Shards),
			"--log-level", c.cfg.LogLevel}, b.tls...)...)
	if err != nil {
		return err
	}
	b.proc = p
	return nil
}

// WaitHealthy waits until every running broker's and the proxy's /healthz
// answer 200, up to StartTimeout.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	for _, b := range c.brokers {
		if b.proc == nil || b.proc.Exited() {
			continue
		}
		health := proc.HTTP200("http://" + b.metrics + "/healthz")
		if c.https != nil { // with TLS files the metrics port serves HTTPS
			health = proc.HTTP200Client(c.https, "https://"+b.metrics+"/healthz")
		}
		if err := proc.WaitFor(ctx, 100*time.Millisecond, health, b.proc); err != nil {
			return fmt.Errorf("cluster: broker-%d not healthy: %w", b.id, err)
		}
	}
	health := proc.HTTP200("http://" + c.proxyHTTP + "/healthz")
	if c.https != nil {
		health = proc.HTTP200Client(c.https, "https://"+c.proxyHTTP+"/healthz")
	}
	if err := proc.WaitFor(ctx, 100*time.Millisecond, health, c.proxy); err != nil {
		return fmt.Errorf("cluster: proxy not healthy: %w", err)
	}
	return nil
}

// issueTLS makes the cluster's CA and certificates under <DataDir>/tls,
// sets each broker's TLS flags and the clients' files, and returns the
// proxy's flags.
func (c *Cluster) issueTLS() ([]string, error) {
	dir := filepath.Join(c.cfg.DataDir, "tls")
	ca, err := devca.New(dir, "sundial-loadtest", 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	brokers, err := ca.Intermediate(filepath.Join(dir, "brokers"), "sundial-loadtest brokers")
	if err != nil {
		return nil, err
	}
	for _, b := range c.brokers {
		f, err := brokers.Issue(dir, fmt.Sprintf("broker-%d", b.id), tlsfiles.PrincipalURI(tlsfiles.KindBroker, fmt.Sprint(b.id)))
		if err != nil {
			return nil, err
		}
		b.tls = []string{"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile, "--tls-ca-file", f.CAFile, "--tls-raft-ca-file", brokers.SignerFile}
	}
	cluster, err := ca.Issue(dir, "proxy", tlsfiles.PrincipalURI(tlsfiles.KindProxy, "loadtest"))
	if err != nil {
		return nil, err
	}
	clients, err := ca.Issue(dir, "proxy-clients")
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(ca.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	c.clientTLS = &tlsfiles.Files{CAFile: ca.CAFile}
	c.https = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	return []string{"--cluster-cert-file", cluster.CertFile, "--cluster-key-file", cluster.KeyFile, "--cluster-ca-file", cluster.CAFile,
		"--tls-cert-file", clients.CertFile, "--tls-key-file", clients.KeyFile}, nil
}

// makeToken writes a random admin token's secret to <DataDir>/admin.token
// for the proxy's --bootstrap-token-file and keeps it for Token.
func (c *Cluster) makeToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	c.token = hex.EncodeToString(b[:])
	path := filepath.Join(c.cfg.DataDir, "admin.token")
	return path, os.WriteFile(path, []byte(c.token+"\n"), 0o600)
}

// Token is the bearer token clients send (Config.Auth), "" without auth.
func (c *Cluster) Token() string { return c.token }

// ClientTLS is what a client verifies the proxy with (a CA file only: the
// proxy asks no client certificate), nil for a cluster without TLS.
func (c *Cluster) ClientTLS() *tlsfiles.Files { return c.clientTLS }

// ProxyAddr is the proxy's gRPC address.
func (c *Cluster) ProxyAddr() string { return c.proxyGRPC }

// StartEmpty starts a new cluster of the same shape as c (brokers,
// shards, binaries, TLS, auth, log level) with its data in dataDir, which
// Stop leaves in place: a cluster to restore c's backups into.
func (c *Cluster) StartEmpty(ctx context.Context, dataDir string) (*Cluster, error) {
	cfg := c.cfg
	cfg.BinDir, cfg.DataDir, cfg.KeepData = c.bin, dataDir, true
	return Start(ctx, cfg)
}

// DataDir is the directory holding the brokers' data and the logs.
func (c *Cluster) DataDir() string { return c.cfg.DataDir }

// Shards is the number of event shards the cluster was bootstrapped with.
func (c *Cluster) Shards() int { return c.cfg.Shards }

// Brokers lists the node ids.
func (c *Cluster) Brokers() []NodeID {
	ids := make([]NodeID, len(c.brokers))
	for i, b := range c.brokers {
		ids[i] = b.id
	}
	return ids
}

// BrokerPids are the pids of the running brokers.
func (c *Cluster) BrokerPids() []int {
	var pids []int
	for _, b := range c.brokers {
		if b.proc != nil && !b.proc.Exited() {
			pids = append(pids, b.proc.Pid())
		}
	}
	return pids
}

// ProxyPid is the proxy's pid.
func (c *Cluster) ProxyPid() int { return c.proxy.Pid() }

// BrokerHTTPAddrs are the brokers' metrics addresses (/metrics,
// /healthz), by node id in order.
func (c *Cluster) BrokerHTTPAddrs() []string {
	addrs := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		addrs[i] = b.metrics
	}
	return addrs
}

// BrokerAdminAddrs are the brokers' admin addresses (/debug/pprof), by
// node id in order.
func (c *Cluster) BrokerAdminAddrs() []string {
	addrs := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		addrs[i] = b.admin
	}
	return addrs
}

// ProxyHTTPAddr is the proxy's HTTP address (/metrics, /healthz, the
// HTTP/JSON API).
func (c *Cluster) ProxyHTTPAddr() string { return c.proxyHTTP }

// ProxyAdminAddr is the proxy's admin address (/debug/pprof).
func (c *Cluster) ProxyAdminAddr() string { return c.proxyAdmin }

// DataDirs are the brokers' data directories.
func (c *Cluster) DataDirs() []string {
	dirs := make([]string, len(c.brokers))
	for i, b := range c.brokers {
		dirs[i] = b.dir
	}
	return dirs
}

func (c *Cluster) broker(id NodeID) (*broker, error) {
	for _, b := range c.brokers {
		if b.id == id {
			return b, nil
		}
	}
	return nil, fmt.Errorf("cluster: no broker %d", id)
}

// Kill SIGKILLs broker id.
func (c *Cluster) Kill(id NodeID) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	if b.proc == nil {
		return nil
	}
	return b.proc.Kill()
}

// StopBroker stops broker id gracefully (SIGTERM).
func (c *Cluster) StopBroker(id NodeID) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	if b.proc == nil {
		return nil
	}
	return b.proc.Stop()
}

// Restart starts broker id again (stopping it first if it runs) on the
// same addresses and data, without waiting for health.
func (c *Cluster) Restart(id NodeID) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	if b.proc != nil && !b.proc.Exited() {
		if err := b.proc.Stop(); err != nil {
			return err
		}
	}
	return c.startBroker(b)
}

// Stop stops the proxy and every broker by pid, and removes a temp data
// directory unless KeepData.
func (c *Cluster) Stop() error {
	var errs []error
	if c.proxy != nil {
		errs = append(errs, c.proxy.Stop())
	}
	for _, b := range c.brokers {
		if b.proc != nil {
			errs = append(errs, b.proc.Stop())
		}
	}
	if c.tempData && !c.cfg.KeepData {
		errs = append(errs, os.RemoveAll(c.cfg.DataDir))
	}
	return errors.Join(errs...)
}

// LogTails returns the last bytes of every process log, for failure reports.
func (c *Cluster) LogTails(n int) string {
	var sb strings.Builder
	for _, b := range c.brokers {
		if b.proc != nil {
			fmt.Fprintf(&sb, "--- broker-%d:\n%s\n", b.id, b.proc.Tail(n))
		}
	}
	if c.proxy != nil {
		fmt.Fprintf(&sb, "--- proxy:\n%s\n", c.proxy.Tail(n))
	}
	return sb.String()
}
