// Command sundial-local runs a Sundial cluster on loopback from the binaries
// next to it (bin/): what `make run` starts.
//
// It starts N brokers and one proxy on the ports of DESIGN §5 (proxy gRPC
// 7400, HTTP 7480; broker i: gRPC 7500+i, Raft 7600+i, metrics 7700+i, admin 7800+i),
// waits until the proxy's /readyz answers 200 (it has a routing table and
// reaches the leader of every shard it serves), prints the endpoints, and
// then waits. Ctrl-C (or SIGTERM / SIGHUP) stops every process it started,
// by pid: SIGTERM, then SIGKILL after proc.StopTimeout. If a process exits
// on its own once the cluster is up, its name, pid, exit status and log
// tail are printed and the others keep running, so failover can be tried by
// hand; a process that exits during the start stops the cluster.
//
// "sundial-local restart N" (make restart-broker N=2, make restart-proxy;
// N is 2, broker-2 or proxy) asks the running sundial-local, through the
// socket <data dir>/control.sock, to start an exited process again with its
// first arguments; it stays owned by that run (see control.go).
//
// "sundial-local join" (make join) instead starts one more broker that
// joins the running cluster: the next broker index whose ports are free
// (see runJoin), data in <data dir>/broker-i. Without SUNDIAL_LOCAL_DIR or
// SUNDIAL_BROKERS, join and restart find the cluster that runs (the
// ./data/local or ./data/local-N whose control socket answers) and take
// its directory and size.
//
// A run starts what the data dir holds (see members.go): the bootstrap
// brokers, every broker that joined since, and never one the cluster
// removed, so a `make run` after the README's walkthrough brings back the
// cluster as it was left. "sundial-local join --wait"
// (make join WAIT=1) starts it in the waiting state instead, for
// "shardctl add-node ADDR" to add.
//
// Settings come from the environment and are removed from it before the
// servers start, so the servers' own SUNDIAL_* overrides never see them:
//
//	SUNDIAL_BROKERS=3        number of brokers, 1..9 (1 = replication factor 1)
//	SUNDIAL_SHARDS=8         event shards created when the cluster is bootstrapped
//	SUNDIAL_LOG_LEVEL=info   log level of every process
//	SUNDIAL_LOCAL_DIR        data directory; default ./data/local for 3 brokers and
//	                         ./data/local-N otherwise (a cluster's data only fits
//	                         the member list it was bootstrapped with)
//	SUNDIAL_START_TIMEOUT=60 seconds to wait for the proxy's /readyz
//	SUNDIAL_SECURE=1         TLS on every hop and authentication (secure.go); the
//	                         default data directory then ends in -secure
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// settingVars are the environment variables sundial-local consumes.
var settingVars = []string{"SUNDIAL_BROKERS", "SUNDIAL_SHARDS", "SUNDIAL_LOG_LEVEL", "SUNDIAL_LOCAL_DIR", "SUNDIAL_START_TIMEOUT", "SUNDIAL_SECURE"}

func main() {
	args := os.Args[1:]
	joining := len(args) >= 1 && len(args) <= 2 && args[0] == "join"
	waitForAdd := joining && len(args) == 2
	if waitForAdd && args[1] != "--wait" {
		joining = false
	}
	restarting := len(args) == 2 && args[0] == "restart"
	if len(args) > 0 && !joining && !restarting {
		fmt.Fprintln(os.Stderr, "usage: sundial-local [join [--wait] | restart N|broker-N|proxy]")
		os.Exit(2)
	}
	cfg, err := configFromEnv(os.Getenv)
	if err == nil {
		cfg.BinDir, err = binDir()
	}
	// "join" and "restart" act on the cluster that runs: unless told its
	// directory or size, they find it.
	if err == nil && (joining || restarting) && os.Getenv("SUNDIAL_LOCAL_DIR") == "" && os.Getenv("SUNDIAL_BROKERS") == "" {
		var dir string
		var n int
		var found bool
		if dir, n, found, err = findRunningCluster(filepath.Dir(cfg.DataDir)); found {
			cfg.DataDir, cfg.Brokers, cfg.Layout = dir, n, DefaultLayout(n)
			// SUNDIAL_SECURE=1 make run names its directory ...-secure.
			cfg.Secure = cfg.Secure || strings.HasSuffix(filepath.Base(dir), "-secure")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sundial-local:", err)
		os.Exit(2)
	}
	for _, v := range settingVars {
		os.Unsetenv(v)
	}
	// Signals stay caught until run returns: a second Ctrl-C while the
	// cluster stops must not leave its processes behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	switch {
	case joining:
		err = runJoin(ctx, cfg, waitForAdd, os.Stdout)
	case restarting:
		err = runRestart(ctx, cfg, args[1], os.Stdout)
	default:
		err = run(ctx, cfg, os.Stdout)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sundial-local:", err)
		os.Exit(1)
	}
}

// binDir is the directory of the running executable, where make build puts
// the servers too.
func binDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Dir(exe), nil
}

// Config is what run starts.
type Config struct {
	Brokers      int           // 1..9
	Shards       int           // event shards at bootstrap
	LogLevel     string        // of every process
	DataDir      string        // broker-N/, logs/, cluster-members, run.pids
	StartTimeout time.Duration // for the proxy's /readyz
	BinDir       string        // holds sundial-broker and sundial-proxy
	Layout       Layout
	// Secure runs TLS on every hop and authentication (SUNDIAL_SECURE=1).
	Secure bool
}

// Layout is every address of the cluster.
type Layout struct {
	ProxyGRPC, ProxyHTTP string
	ProxyAdmin           string        // the proxy's pprof listener
	Brokers              []BrokerAddrs // broker i+1 at index i
}

// BrokerAddrs are one broker's listen addresses.
type BrokerAddrs struct{ GRPC, Raft, Metrics, Admin string }

// adminFlag is the broker's --admin-addr: Admin, or off when it has none.
func (b BrokerAddrs) adminFlag() string {
	if b.Admin == "" {
		return "off"
	}
	return b.Admin
}

// broker is the addresses of broker id: l.Brokers[id-1], or the ports of
// DESIGN §5 for an id past them (a broker that joined).
func (l Layout) broker(id int) BrokerAddrs {
	if id <= len(l.Brokers) {
		return l.Brokers[id-1]
	}
	return DefaultLayout(id).Brokers[id-1]
}

// DefaultLayout is the local cluster of DESIGN §5 with n brokers.
func DefaultLayout(n int) Layout {
	l := Layout{ProxyGRPC: "127.0.0.1:7400", ProxyHTTP: "127.0.0.1:7480", ProxyAdmin: "127.0.0.1:7481"}
	for i := 1; i <= n; i++ {
		l.Brokers = append(l.Brokers, BrokerAddrs{
			GRPC:    fmt.Sprintf("127.0.0.1:%d", 7500+i),
			Raft:    fmt.Sprintf("127.0.0.1:%d", 7600+i),
			Metrics: fmt.Sprintf("127.0.0.1:%d", 7700+i),
			Admin:   fmt.Sprintf("127.0.0.1:%d", 7800+i),
		})
	}
	return l
}

// configFromEnv reads the SUNDIAL_* settings through getenv.
func configFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Brokers: 3, Shards: 8, LogLevel: "info", StartTimeout: 60 * time.Second}
	positive := func(name string, dst *int, limit int) error {
		v := getenv(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > limit {
			return fmt.Errorf("%s must be a number in 1..%d, got %q", name, limit, v)
		}
		*dst = n
		return nil
	}
	secs := int(cfg.StartTimeout / time.Second)
	if err := errors.Join(
		positive("SUNDIAL_BROKERS", &cfg.Brokers, 9),
		positive("SUNDIAL_SHARDS", &cfg.Shards, 1<<16),
		positive("SUNDIAL_START_TIMEOUT", &secs, 24*3600),
	); err != nil {
		return Config{}, err
	}
	cfg.StartTimeout = time.Duration(secs) * time.Second
	if v := getenv("SUNDIAL_LOG_LEVEL"); v != "" {
		cfg.LogLevel = v
	}
	switch v := getenv("SUNDIAL_SECURE"); v {
	case "", "0", "false":
	case "1", "true":
		cfg.Secure = true
	default:
		return Config{}, fmt.Errorf("SUNDIAL_SECURE must be 1 or 0, got %q", v)
	}
	cfg.DataDir = getenv("SUNDIAL_LOCAL_DIR")
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join("data", "local")
		if cfg.Brokers != 3 {
			cfg.DataDir += "-" + strconv.Itoa(cfg.Brokers)
		}
		if cfg.Secure {
			// A cluster's data only fits the transport it was made with.
			cfg.DataDir += "-secure"
		}
	}
	cfg.Layout = DefaultLayout(cfg.Brokers)
	return cfg, nil
}

// members is the list every broker bootstraps with, brokers 1..n:
// id=raft-addr@grpc-addr.
func (l Layout) members(n int) string {
	var m []string
	for id := 1; id <= n; id++ {
		b := l.broker(id)
		m = append(m, fmt.Sprintf("%d=%s@%s", id, b.Raft, b.GRPC))
	}
	return strings.Join(m, ",")
}

// run starts the cluster, waits for it, and keeps it running until ctx ends;
// it stops every process it started before returning. A process that exits
// on its own after the start is reported (name, pid, exit status, log tail)
// and the others keep running: "sundial-local restart NAME" from another
// shell asks this run to start it again (see supervisor). It returns nil
// when ctx ended it.
func run(ctx context.Context, cfg Config, out io.Writer) error {
	for _, b := range []string{"sundial-broker", "sundial-proxy"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return fmt.Errorf("%s is missing: run 'make build' (or 'make run')", filepath.Join(cfg.BinDir, b))
		}
	}
	bootstrap := cfg.Layout.members(cfg.Brokers)
	if err := claimDataDir(cfg.DataDir, bootstrap); err != nil {
		return err
	}
	members, skipped, err := localMembers(cfg.DataDir, cfg.Brokers)
	if err != nil {
		return err
	}
	pidFile := filepath.Join(cfg.DataDir, "run.pids")
	if err := refuseBusyPorts(ctx, cfg.Layout, members, pidFile); err != nil {
		return err
	}
	if err := os.WriteFile(pidFile, nil, 0o644); err != nil {
		return err
	}

	var sec *secure
	if cfg.Secure {
		if sec, err = prepareSecure(cfg.DataDir); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "Sundial local cluster: %d broker(s), %d shards at bootstrap, data in %s\n", cfg.Brokers, cfg.Shards, cfg.DataDir)
	for _, line := range skipped {
		fmt.Fprintln(out, "  "+line)
	}
	s := newSupervisor(out, pidFile, cfg.Layout.ProxyHTTP)
	s.sec = sec
	defer s.stopAll()
	var grpcs []string
	for _, m := range members {
		grpcs = append(grpcs, cfg.Layout.broker(m.id).GRPC)
	}
	for _, m := range members {
		b := cfg.Layout.broker(m.id)
		name := fmt.Sprintf("broker-%d", m.id)
		dir := filepath.Join(cfg.DataDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		args := []string{"--node-id", strconv.Itoa(m.id), "--grpc-addr", b.GRPC, "--raft-addr", b.Raft, "--metrics-addr", b.Metrics,
			"--admin-addr", b.adminFlag(), "--data-dir", dir, "--log-level", cfg.LogLevel}
		if m.joined {
			// A joined broker starts on its data: its identity holds the
			// cluster id, so --join only checks it with the other members.
			var others []string
			for _, o := range members {
				if o.id != m.id {
					others = append(others, cfg.Layout.broker(o.id).GRPC)
				}
			}
			if len(others) > 0 { // alone, it starts on its identity without any
				args = append(args, "--join", strings.Join(others, ","))
			}
		} else {
			args = append(args, "--initial-members", bootstrap, "--shards", strconv.Itoa(cfg.Shards))
		}
		if sec != nil {
			tlsArgs, err := sec.brokerArgs(m.id)
			if err != nil {
				return err
			}
			args = append(args, tlsArgs...)
		}
		broker := spec{
			name: name, bin: filepath.Join(cfg.BinDir, "sundial-broker"),
			readyz: "http://" + b.Metrics + "/readyz", logPath: filepath.Join(cfg.DataDir, "logs", name+".log"),
			args: args,
		}
		if sec != nil { // with TLS files the metrics port serves HTTPS
			broker.readyz = "https://" + b.Metrics + "/readyz"
			if broker.https, err = sec.httpsClient(); err != nil {
				return err
			}
		}
		if err := s.start(broker); err != nil {
			return err
		}
	}
	proxy := spec{
		name: "proxy", bin: filepath.Join(cfg.BinDir, "sundial-proxy"),
		readyz: "http://" + cfg.Layout.ProxyHTTP + "/readyz", logPath: filepath.Join(cfg.DataDir, "logs", "proxy.log"),
		args: []string{"--grpc-addr", cfg.Layout.ProxyGRPC, "--http-addr", cfg.Layout.ProxyHTTP, "--admin-addr", cfg.Layout.ProxyAdmin,
			"--brokers", strings.Join(grpcs, ","), "--log-level", cfg.LogLevel},
	}
	if sec != nil {
		tlsArgs, err := sec.proxyArgs()
		if err != nil {
			return err
		}
		proxy.args = append(proxy.args, tlsArgs...)
		proxy.readyz = "https://" + cfg.Layout.ProxyHTTP + "/readyz"
		if proxy.https, err = sec.httpsClient(); err != nil {
			return err
		}
	}
	if err := s.start(proxy); err != nil {
		return err
	}

	began := time.Now()
	if err := waitReady(ctx, cfg.StartTimeout, s.list(), out); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(out, "\nsundial-local: stopping the cluster")
			return nil
		}
		fmt.Fprintf(out, "sundial-local: %v\n", err)
		return errors.New("the cluster did not start")
	}
	// Without the socket (a data dir path too long for one, say) the
	// cluster still runs; only "sundial-local restart" cannot reach it.
	if ctl, err := listenControl(ctx, controlPath(cfg.DataDir), s); err != nil {
		fmt.Fprintf(out, "sundial-local: %v: 'make restart-broker' will not reach this run\n", err)
	} else {
		defer ctl.Close()
	}
	printEndpoints(out, cfg, members, time.Since(began))
	if sec != nil {
		if err := sec.ensureDemo(ctx, cfg.BinDir, cfg.Layout.ProxyGRPC); err != nil {
			fmt.Fprintf(out, "sundial-local: the demo token was not made: %v\n", err)
		}
		sec.print(out, cfg.Layout)
	} else {
		printTryIt(out, cfg)
	}

	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchRemoved(wctx, cfg.DataDir, cfg.Layout.ProxyHTTP, sec, out)
	}()
	s.supervise(ctx)
	stopWatch()
	<-watched
	fmt.Fprintln(out, "\nsundial-local: stopping the cluster")
	return nil
}

// claimDataDir creates dir and refuses a directory bootstrapped with another
// member list.
func claimDataDir(dir, members string) error {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	shape := filepath.Join(dir, "cluster-members")
	old, err := os.ReadFile(shape)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.WriteFile(shape, []byte(members+"\n"), 0o644)
	case err != nil:
		return err
	case strings.TrimSpace(string(old)) != members:
		return fmt.Errorf("%s holds a cluster with members '%s', not '%s'.\nUse another directory (SUNDIAL_LOCAL_DIR=...) or remove it: rm -rf %s",
			dir, strings.TrimSpace(string(old)), members, dir)
	}
	return nil
}

// refuseBusyPorts fails when any address of the proxy or of members
// accepts connections, naming the processes of the last run if its pid
// file lists any.
func refuseBusyPorts(ctx context.Context, l Layout, members []member, pidFile string) error {
	addrs := []string{l.ProxyGRPC, l.ProxyHTTP, l.ProxyAdmin}
	for _, m := range members {
		b := l.broker(m.id)
		addrs = append(addrs, b.GRPC, b.Raft, b.Metrics)
		if b.Admin != "" {
			addrs = append(addrs, b.Admin)
		}
	}
	var busy []string
	for _, a := range addrs {
		if proc.TCPOpen(a)(ctx) == nil {
			busy = append(busy, a)
		}
	}
	if len(busy) == 0 {
		return nil
	}
	hint := ""
	if b, err := os.ReadFile(pidFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		hint = "\nThe last run started these processes (pid name): " + strings.Join(strings.Split(strings.TrimSpace(string(b)), "\n"), ", ")
	}
	return fmt.Errorf("already in use: %s (is another 'make run', or a 'make join' broker of this cluster, still running? Ctrl-C it first)%s", strings.Join(busy, " "), hint)
}

// waitReady waits for the proxy's /readyz (the last child), printing every
// process's /readyz status every few seconds.
func waitReady(ctx context.Context, timeout time.Duration, children []*child, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	procs := make([]*proc.Process, len(children))
	for i, c := range children {
		procs[i] = c.p
	}
	proxy := children[len(children)-1]
	began := time.Now()
	nextReport := began.Add(2 * time.Second)
	err := proc.WaitFor(ctx, 500*time.Millisecond, func(ctx context.Context) error {
		err := proc.HTTP200Client(proxy.client(), proxy.readyz)(ctx)
		if err != nil && time.Now().After(nextReport) {
			line := fmt.Sprintf("waiting for %s (%ds/%ds):", proxy.readyz, int(time.Since(began).Seconds()), int(timeout.Seconds()))
			for _, c := range children {
				line += fmt.Sprintf(" %s=%s", c.name, httpStatus(ctx, c.client(), c.readyz))
			}
			fmt.Fprintln(out, line)
			nextReport = time.Now().Add(3 * time.Second)
		}
		return err
	}, procs...)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "the proxy's /readyz is not 200 after %v (%v)", timeout, err)
	for _, c := range children {
		fmt.Fprintf(&sb, "\n--- last lines of %s:\n%s", c.logPath, indent(c.p.Tail(1500)))
	}
	sb.WriteString("\nstopping the cluster (raise SUNDIAL_START_TIMEOUT to wait longer)")
	return errors.New(sb.String())
}

// httpStatus is the status code GET url answers, or "down".
func httpStatus(ctx context.Context, client *http.Client, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "down"
	}
	resp, err := client.Do(req)
	if err != nil {
		return "down"
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

func printEndpoints(out io.Writer, cfg Config, members []member, took time.Duration) {
	l := cfg.Layout
	scheme := "http"
	if cfg.Secure {
		scheme = "https"
	}
	fmt.Fprintf(out, "\nSundial is up after %ds (%d broker(s), data in %s, logs in %s).\n\n",
		int(took.Seconds()), len(members), cfg.DataDir, filepath.Join(cfg.DataDir, "logs"))
	fmt.Fprintf(out, "  proxy     gRPC %s   HTTP %s://%s  (/livez, /readyz, /metrics)\n", l.ProxyGRPC, scheme, l.ProxyHTTP)
	fmt.Fprintf(out, "  HTTP API  %s://%s/v1/   docs %s://%s/docs   OpenAPI %s://%s/openapi.json\n", scheme, l.ProxyHTTP, scheme, l.ProxyHTTP, scheme, l.ProxyHTTP)
	fmt.Fprintf(out, "  admin UI  %s://%s/ui/   pprof http://%s/debug/pprof/\n", scheme, l.ProxyHTTP, l.ProxyAdmin)
	for _, m := range members {
		b := l.broker(m.id)
		pprof := ""
		if b.Admin != "" {
			pprof = "   pprof http://" + b.Admin + "/debug/pprof/"
		}
		fmt.Fprintf(out, "  broker-%d  gRPC %s   metrics %s://%s/metrics   raft %s%s\n", m.id, b.GRPC, scheme, b.Metrics, b.Raft, pprof)
	}
}

// printTryIt shows first commands against the plaintext cluster.
func printTryIt(out io.Writer, cfg Config) {
	l := cfg.Layout
	fmt.Fprintf(out, `
Try it from another shell:
  bin/shardctl publish --topic demo --delay 5s hello
  bin/shardctl consume --topic demo
  bin/shardctl status
  grpcurl -plaintext %s list
  curl -s -X POST http://%s/v1/topics/demo/messages -d '{"messages":[{"text":"hello","delayMs":5000}]}'

Try a failover: kill a broker (kill <pid>; the pids are in %s); the others
keep running and this window says how to start it again (make restart-broker N=<n>).

Grow and shrink it: make join (one more broker), bin/shardctl rebalance, drain-node, remove-node,
shards add; the README's "Grow, shrink and heal a local cluster" walks through them.

Ctrl-C stops the cluster; the data stays in %s for the next 'make run' ('make clean' removes it).
`, l.ProxyGRPC, l.ProxyHTTP, filepath.Join(cfg.DataDir, "run.pids"), cfg.DataDir)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
