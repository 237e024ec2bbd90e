// Command sundial-local runs a Sundial cluster on loopback from the binaries
// next to it (bin/): what `make run` starts.
//
// It starts N brokers and one proxy on the ports of DESIGN §5 (proxy gRPC
// 7400, HTTP 7480; broker i: gRPC 7500+i, Raft 7600+i, metrics 7700+i),
// waits until the proxy's /readyz answers 200 (it has a routing table and
// reaches the leader of every shard it serves), prints the endpoints, and
// then waits. Ctrl-C (or SIGTERM / SIGHUP) stops every process it started,
// by pid: SIGTERM, then SIGKILL after proc.StopTimeout. If a process exits
// on its own, the tail of its log is printed and the others are stopped.
//
// "sundial-local join" (make join) instead starts one more broker that
// joins the running cluster: the next broker index whose ports are free
// (see runJoin), data in <data dir>/broker-i.
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
	"sync"
	"syscall"
	"time"

	"github.com/sundialmq/sundial/proc"
)

// settingVars are the environment variables sundial-local consumes.
var settingVars = []string{"SUNDIAL_BROKERS", "SUNDIAL_SHARDS", "SUNDIAL_LOG_LEVEL", "SUNDIAL_LOCAL_DIR", "SUNDIAL_START_TIMEOUT"}

func main() {
	joining := len(os.Args) == 2 && os.Args[1] == "join"
	if len(os.Args) > 1 && !joining {
		fmt.Fprintln(os.Stderr, "usage: sundial-local [join]")
		os.Exit(2)
	}
	cfg, err := configFromEnv(os.Getenv)
	if err == nil {
		cfg.BinDir, err = binDir()
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
	if joining {
		err = runJoin(ctx, cfg, os.Stdout)
	} else {
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
}

// Layout is every address of the cluster.
type Layout struct {
	ProxyGRPC, ProxyHTTP string
	Brokers              []BrokerAddrs // broker i+1 at index i
}

// BrokerAddrs are one broker's listen addresses.
type BrokerAddrs struct{ GRPC, Raft, Metrics string }

// DefaultLayout is the local cluster of DESIGN §5 with n brokers.
func DefaultLayout(n int) Layout {
	l := Layout{ProxyGRPC: "127.0.0.1:7400", ProxyHTTP: "127.0.0.1:7480"}
	for i := 1; i <= n; i++ {
		l.Brokers = append(l.Brokers, BrokerAddrs{
			GRPC:    fmt.Sprintf("127.0.0.1:%d", 7500+i),
			Raft:    fmt.Sprintf("127.0.0.1:%d", 7600+i),
			Metrics: fmt.Sprintf("127.0.0.1:%d", 7700+i),
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
	cfg.DataDir = getenv("SUNDIAL_LOCAL_DIR")
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join("data", "local")
		if cfg.Brokers != 3 {
			cfg.DataDir += "-" + strconv.Itoa(cfg.Brokers)
		}
	}
	cfg.Layout = DefaultLayout(cfg.Brokers)
	return cfg, nil
}

// members is the list every broker bootstraps with: id=raft-addr@grpc-addr.
func (l Layout) members() string {
	var m []string
	for i, b := range l.Brokers {
		m = append(m, fmt.Sprintf("%d=%s@%s", i+1, b.Raft, b.GRPC))
	}
	return strings.Join(m, ",")
}

// child is one started process.
type child struct {
	name    string
	p       *proc.Process
	readyz  string // its /readyz URL
	logPath string
}

// run starts the cluster, waits for it, and keeps it running until ctx ends
// or a process exits; it stops every process it started before returning.
// It returns nil when ctx ended it.
func run(ctx context.Context, cfg Config, out io.Writer) error {
	for _, b := range []string{"sundial-broker", "sundial-proxy"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return fmt.Errorf("%s is missing: run 'make build' (or 'make run')", filepath.Join(cfg.BinDir, b))
		}
	}
	members := cfg.Layout.members()
	if err := claimDataDir(cfg.DataDir, members); err != nil {
		return err
	}
	pidFile := filepath.Join(cfg.DataDir, "run.pids")
	if err := refuseBusyPorts(ctx, cfg.Layout, pidFile); err != nil {
		return err
	}
	if err := os.WriteFile(pidFile, nil, 0o644); err != nil {
		return err
	}

	fmt.Fprintf(out, "Sundial local cluster: %d broker(s), %d shards at bootstrap, data in %s\n", cfg.Brokers, cfg.Shards, cfg.DataDir)
	var children []*child
	defer func() { stopAll(out, children, pidFile) }()
	start := func(name, readyz string, args ...string) error {
		logPath := filepath.Join(cfg.DataDir, "logs", name+".log")
		if _, err := os.Stat(logPath); err == nil {
			if err := os.Rename(logPath, logPath+".1"); err != nil {
				return err
			}
		}
		bin := "sundial-broker"
		if name == "proxy" {
			bin = "sundial-proxy"
		}
		p, err := proc.Start(name, filepath.Join(cfg.BinDir, bin), logPath, args...)
		if err != nil {
			return err
		}
		children = append(children, &child{name: name, p: p, readyz: readyz, logPath: logPath})
		fmt.Fprintf(out, "started %s (pid %d), log %s\n", name, p.Pid(), logPath)
		return appendLine(pidFile, fmt.Sprintf("%d %s", p.Pid(), name))
	}
	var grpcs []string
	for i, b := range cfg.Layout.Brokers {
		id := i + 1
		dir := filepath.Join(cfg.DataDir, fmt.Sprintf("broker-%d", id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := start(fmt.Sprintf("broker-%d", id), "http://"+b.Metrics+"/readyz",
			"--node-id", strconv.Itoa(id), "--grpc-addr", b.GRPC, "--raft-addr", b.Raft, "--metrics-addr", b.Metrics,
			"--data-dir", dir, "--initial-members", members, "--shards", strconv.Itoa(cfg.Shards),
			"--log-level", cfg.LogLevel); err != nil {
			return err
		}
		grpcs = append(grpcs, b.GRPC)
	}
	if err := start("proxy", "http://"+cfg.Layout.ProxyHTTP+"/readyz",
		"--grpc-addr", cfg.Layout.ProxyGRPC, "--http-addr", cfg.Layout.ProxyHTTP,
		"--brokers", strings.Join(grpcs, ","), "--log-level", cfg.LogLevel); err != nil {
		return err
	}

	began := time.Now()
	if err := waitReady(ctx, cfg.StartTimeout, children, out); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(out, "\nsundial-local: stopping the cluster")
			return nil
		}
		fmt.Fprintf(out, "sundial-local: %v\n", err)
		return errors.New("the cluster did not start")
	}
	printEndpoints(out, cfg, time.Since(began))

	exited := make(chan *child, len(children))
	for _, c := range children {
		go func() {
			<-c.p.Done()
			exited <- c
		}()
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\nsundial-local: stopping the cluster")
		return nil
	case c := <-exited:
		fmt.Fprintf(out, "sundial-local: %s (pid %d) exited (%v); last lines of %s:\n%s\nsundial-local: stopping the others\n",
			c.name, c.p.Pid(), c.p.Err(), c.logPath, indent(c.p.Tail(3000)))
		return fmt.Errorf("%s exited", c.name)
	}
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

// refuseBusyPorts fails when any address of the layout accepts connections,
// naming the processes of the last run if its pid file lists any.
func refuseBusyPorts(ctx context.Context, l Layout, pidFile string) error {
	addrs := []string{l.ProxyGRPC, l.ProxyHTTP}
	for _, b := range l.Brokers {
		addrs = append(addrs, b.GRPC, b.Raft, b.Metrics)
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
	return fmt.Errorf("already in use: %s (is another 'make run' still running?)%s", strings.Join(busy, " "), hint)
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
		err := proc.HTTP200(proxy.readyz)(ctx)
		if err != nil && time.Now().After(nextReport) {
			line := fmt.Sprintf("waiting for %s (%ds/%ds):", proxy.readyz, int(time.Since(began).Seconds()), int(timeout.Seconds()))
			for _, c := range children {
				line += fmt.Sprintf(" %s=%s", c.name, httpStatus(ctx, c.readyz))
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
func httpStatus(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "down"
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "down"
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// stopAll stops every child by pid, all at once (SIGTERM, then SIGKILL
// after proc.StopTimeout), and empties the pid file.
func stopAll(out io.Writer, children []*child, pidFile string) {
	var wg sync.WaitGroup
	for _, c := range children {
		if c.p.Exited() {
			continue
		}
		fmt.Fprintf(out, "stopping %s (pid %d)\n", c.name, c.p.Pid())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.p.Stop(); err != nil {
				fmt.Fprintf(out, "sundial-local: %v\n", err)
			}
		}()
	}
	wg.Wait()
	if len(children) > 0 {
		_ = os.WriteFile(pidFile, nil, 0o644)
		fmt.Fprintf(out, "sundial-local: stopped; data kept in %s\n", filepath.Dir(pidFile))
	}
}

func printEndpoints(out io.Writer, cfg Config, took time.Duration) {
	l := cfg.Layout
	fmt.Fprintf(out, "\nSundial is up after %ds (%d broker(s), data in %s, logs in %s).\n\n",
		int(took.Seconds()), cfg.Brokers, cfg.DataDir, filepath.Join(cfg.DataDir, "logs"))
	fmt.Fprintf(out, "  proxy     gRPC %s   HTTP http://%s  (/livez, /readyz, /metrics)\n", l.ProxyGRPC, l.ProxyHTTP)
	fmt.Fprintf(out, "  HTTP API  http://%s/v1/   docs http://%s/docs   OpenAPI http://%s/openapi.json\n", l.ProxyHTTP, l.ProxyHTTP, l.ProxyHTTP)
	fmt.Fprintf(out, "  admin UI  http://%s/ui/\n", l.ProxyHTTP)
	for i, b := range l.Brokers {
		fmt.Fprintf(out, "  broker-%d  gRPC %s   metrics http://%s/metrics   raft %s\n", i+1, b.GRPC, b.Metrics, b.Raft)
	}
	fmt.Fprintf(out, `
Try it from another shell:
  bin/shardctl publish --topic demo --delay 5s hello
  bin/shardctl consume --topic demo
  bin/shardctl status
  grpcurl -plaintext %s list
  curl -s -X POST http://%s/v1/topics/demo/messages -d '{"messages":[{"text":"hello","delayMs":5000}]}'

Ctrl-C stops the cluster; the data stays in %s for the next 'make run' ('make clean' removes it).
`, l.ProxyGRPC, l.ProxyHTTP, cfg.DataDir)
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	return errors.Join(err, f.Close())
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
