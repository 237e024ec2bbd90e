// Command sundial-broker runs one Sundial storage node.
//
// Configuration comes from a YAML file (--config), overridden by SUNDIAL_*
// environment variables, overridden by flags.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/proto/healthcheck"
	"github.com/sundialmq/sundial/proto/validate"
)

// exitDataDir is the exit status of a broker whose data dir cannot be
// served (broker.ErrDataDirBehind, broker.ErrRaftLogCorrupt): starting it
// again on the same data dir fails the same way, so a supervisor should
// not restart it (systemd: RestartPreventExitStatus=3).
const exitDataDir = 3

func main() {
	// A data dir fault found in a Dragonboat goroutine ends the process
	// with its one message, not a panic's stack.
	broker.SetDataDirFaultHandler(func(err error) {
		fmt.Fprintln(os.Stderr, "sundial-broker: stopping:", err)
		os.Exit(exitDataDir)
	})
	app := newApp(run)
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sundial-broker:", err)
		var ce usageError
		switch {
		case errors.As(err, &ce):
			os.Exit(2)
		case errors.Is(err, broker.ErrDataDirBehind), errors.Is(err, broker.ErrRaftLogCorrupt):
			os.Exit(exitDataDir)
		}
		os.Exit(1)
	}
}

// newApp is the command line, with action act.
func newApp(act cli.ActionFunc) *cli.App {
	return &cli.App{
		Name:  "sundial-broker",
		Usage: "run a Sundial storage node",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML config file"},
			&cli.Uint64Flag{Name: "node-id", EnvVars: []string{"SUNDIAL_NODE_ID"}, Usage: "this broker's node id (>= 1)"},
			&cli.StringFlag{Name: "grpc-addr", EnvVars: []string{"SUNDIAL_GRPC_ADDR"}, Usage: "gRPC listen address"},
			&cli.StringFlag{Name: "advertise-addr", EnvVars: []string{"SUNDIAL_ADVERTISE_ADDR"}, Usage: "gRPC address others use (default: the listen address)"},
			&cli.StringFlag{Name: "raft-addr", EnvVars: []string{"SUNDIAL_RAFT_ADDR"}, Usage: "Raft address"},
			&cli.StringFlag{Name: "raft-listen-addr", EnvVars: []string{"SUNDIAL_RAFT_LISTEN_ADDR"}, Usage: "Raft listen address when peers dial another (default: the Raft address)"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"SUNDIAL_METRICS_ADDR"}, Usage: "HTTP address of /metrics and /healthz"},
			&cli.StringFlag{Name: "admin-addr", EnvVars: []string{"SUNDIAL_ADMIN_ADDR"}, Usage: "HTTP address of pprof, /debug/pebble and /debug/statehash; keep it on loopback; \"off\" disables it (default 127.0.0.1:7801)"},
			&cli.StringFlag{Name: "data-dir", EnvVars: []string{"SUNDIAL_DATA_DIR"}, Usage: "data directory"},
			&cli.StringFlag{Name: "initial-members", EnvVars: []string{"SUNDIAL_INITIAL_MEMBERS"}, Usage: "ID=RAFT@GRPC,... of the bootstrap brokers"},
			&cli.StringFlag{Name: "join", EnvVars: []string{"SUNDIAL_JOIN"}, Usage: "ADDR[,ADDR...]: gRPC addresses of brokers of a running cluster to join (host:port or dns+srv://NAME); excludes --initial-members"},
			&cli.StringFlag{Name: "join-token-file", EnvVars: []string{"SUNDIAL_JOIN_TOKEN_FILE"}, Usage: "FILE holding the join token (shardctl join-token create) the first join presents; a TLS or --insecure cluster admits no join without one"},
			&cli.BoolFlag{Name: "wait-for-add", EnvVars: []string{"SUNDIAL_WAIT_FOR_ADD"}, Usage: "start without --join or --initial-members and wait until 'shardctl add-node ADDR' adds this broker to a cluster"},
			&cli.StringFlag{Name: "labels", EnvVars: []string{"SUNDIAL_LABELS"}, Usage: "KEY=VALUE[,KEY=VALUE...]: location labels, such as zone=a,rack=r1 (replicas of a shard spread over zones)"},
			&cli.IntFlag{Name: "shards", EnvVars: []string{"SUNDIAL_SHARDS"}, Usage: "event shards created at bootstrap"},
			&cli.IntFlag{Name: "replication-factor", EnvVars: []string{"SUNDIAL_REPLICATION_FACTOR"}, Usage: "replicas per event shard (0: min(3, members))"},
			&cli.StringFlag{Name: "log-level", EnvVars: []string{"SUNDIAL_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
			&cli.BoolFlag{Name: "insecure", EnvVars: []string{"SUNDIAL_INSECURE"}, Usage: "serve without TLS on non-loopback addresses (refused otherwise); logs a warning and shows it on /readyz"},
			&cli.StringFlag{Name: "tls-cert-file", EnvVars: []string{"SUNDIAL_TLS_CERT_FILE"}, Usage: "PEM certificate of this broker, signed by the cluster CA: gRPC serves TLS and peer calls present it (reloaded when it changes)"},
			&cli.StringFlag{Name: "tls-key-file", EnvVars: []string{"SUNDIAL_TLS_KEY_FILE"}, Usage: "PEM key of --tls-cert-file"},
			&cli.StringFlag{Name: "tls-ca-file", EnvVars: []string{"SUNDIAL_TLS_CA_FILE"}, Usage: "PEM cluster CA: gRPC accepts only clients with a certificate it signed; peers are verified against it"},
			&cli.StringFlag{Name: "tls-raft-ca-file", EnvVars: []string{"SUNDIAL_TLS_RAFT_CA_FILE"}, Usage: "PEM CA the Raft transport trusts instead of --tls-ca-file: one that signs broker certificates only (read at start)"},
			&cli.StringFlag{Name: "backup-credentials-file", EnvVars: []string{"SUNDIAL_BACKUP_CREDENTIALS_FILE"}, Usage: "AWS shared-credentials file with the S3 keys for s3:// backup destinations (default: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment)"},
			&cli.StringFlag{Name: "probe", Usage: "only GET this URL (e.g. http://127.0.0.1:7700/readyz) and exit 0 on 200, 1 otherwise: a container health check"},
		},
		Action: act,
	}
}

type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func run(c *cli.Context) error {
	if url := c.String("probe"); url != "" {
		return healthcheck.Probe(url)
	}
	cfg, err := load(c)
	if err != nil {
		return usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return usageError{fmt.Errorf("invalid configuration:\n%w", err)}
	}
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		return usageError{err}
	}
	// The logger writes to stderr, which is unbuffered: Sync has nothing to
	// flush, and on a terminal or pipe it fails with EINVAL.
	defer func() { _ = log.Sync() }()
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && cfg.GoMemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.GoMemoryLimit)
	}
	limitMallocArenas(cfg.MallocArenas, os.LookupEnv)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := broker.New(cfg, log, reg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := b.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("shutting down")
	b.Stop()
	return nil
}

// load layers the YAML file, SUNDIAL_* variables and flags over the defaults.
func load(c *cli.Context) (broker.Config, error) {
	cfg := broker.DefaultConfig()
	if path := c.String("config"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		if err := decodeConfig(data, &cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := overlayEnv(&cfg, os.LookupEnv); err != nil {
		return cfg, err
	}
	if c.IsSet("node-id") {
		cfg.NodeID = c.Uint64("node-id")
		if !c.IsSet("initial-members") && c.String("config") == "" {
			// A lone broker: it is its own initial member.
			cfg.InitialMembers = nil
		}
	}
	setString(c, "grpc-addr", &cfg.GRPCAddr)
	setString(c, "advertise-addr", &cfg.AdvertiseAddr)
	setString(c, "raft-addr", &cfg.RaftAddr)
	setString(c, "raft-listen-addr", &cfg.RaftListenAddr)
	setString(c, "metrics-addr", &cfg.MetricsAddr)
	setString(c, "admin-addr", &cfg.AdminAddr)
	if cfg.AdminAddr == "off" {
		cfg.AdminAddr = ""
	}
	setString(c, "join-token-file", &cfg.JoinTokenFile)
	setString(c, "data-dir", &cfg.DataDir)
	setString(c, "log-level", &cfg.LogLevel)
	if c.IsSet("insecure") {
		cfg.Insecure = c.Bool("insecure")
	}
	setString(c, "tls-cert-file", &cfg.TLSCertFile)
	setString(c, "tls-key-file", &cfg.TLSKeyFile)
	setString(c, "tls-ca-file", &cfg.TLSCAFile)
	setString(c, "tls-raft-ca-file", &cfg.TLSRaftCAFile)
	setString(c, "backup-credentials-file", &cfg.BackupCredentialsFile)
	if c.IsSet("labels") {
		labels, err := validate.ParseLabels(c.String("labels"))
		if err != nil {
			return cfg, fmt.Errorf("--labels: %w", err)
		}
		cfg.Labels = labels
	}
	if c.IsSet("shards") {
		cfg.Shards = c.Int("shards")
	}
	if c.IsSet("replication-factor") {
		cfg.ReplicationFactor = c.Int("replication-factor")
	}
	if c.IsSet("initial-members") {
		m, err := broker.ParseMembers(c.String("initial-members"))
		if err != nil {
			return cfg, err
		}
		cfg.InitialMembers = m
	}
	if c.IsSet("join") {
		if c.IsSet("initial-members") {
			return cfg, errors.New("--join and --initial-members exclude each other: a joining broker learns the members from the cluster")
		}
		cfg.Join = nil
		for _, a := range strings.Split(c.String("join"), ",") {
			if a = strings.TrimSpace(a); a != "" {
				cfg.Join = append(cfg.Join, a)
			}
		}
		if len(cfg.Join) == 0 {
			return cfg, errors.New("--join needs at least one broker address")
		}
		cfg.InitialMembers = nil
		if !c.IsSet("node-id") && c.String("config") == "" {
			cfg.NodeID = 0 // the cluster assigns one
			if !c.IsSet("data-dir") {
				return cfg, errors.New("--join without --node-id needs --data-dir: the default data dir is node 1's")
			}
		}
	}
	if c.Bool("wait-for-add") {
		if c.IsSet("join") || c.IsSet("initial-members") {
			return cfg, errors.New("--wait-for-add excludes --join and --initial-members: shardctl add-node names the cluster")
		}
		cfg.InitialMembers = nil
		if !c.IsSet("node-id") && c.String("config") == "" {
			cfg.NodeID = 0 // the cluster assigns one
			if !c.IsSet("data-dir") {
				return cfg, errors.New("--wait-for-add without --node-id needs --data-dir: the default data dir is node 1's")
			}
		}
	}
	if len(cfg.InitialMembers) == 0 && len(cfg.Join) == 0 && !c.Bool("wait-for-add") {
		cfg.InitialMembers = map[uint64]broker.Member{cfg.NodeID: {RaftAddr: cfg.RaftAddr, GRPCAddr: cfg.GRPCAddr}}
	}
	if m, ok := cfg.InitialMembers[cfg.NodeID]; ok && !c.IsSet("raft-addr") {
		cfg.RaftAddr = m.RaftAddr
		if !c.IsSet("grpc-addr") {
			cfg.GRPCAddr = m.GRPCAddr
		}
	}
	if !c.IsSet("data-dir") && c.String("config") == "" && c.IsSet("node-id") {
		cfg.DataDir = "./data/broker-" + strconv.FormatUint(cfg.NodeID, 10)
	}
	return cfg, nil
}

// decodeConfig sets the settings data names over cfg. Keys are checked: a
// key that is no setting (a misspelling) is an error naming it and its line.
func decodeConfig(data []byte, cfg *broker.Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// overlayEnv sets every scalar setting whose SUNDIAL_<YAML KEY> variable is
// set (e.g. SUNDIAL_CACHE_BYTES=16777216, SUNDIAL_RTT=50ms), parsing the
// value as YAML would.
func overlayEnv(cfg *broker.Config, lookup func(string) (string, bool)) error {
	v := reflect.ValueOf(cfg).Elem()
	var errs []error
	for i := range v.NumField() {
		f := v.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" || f.Type.Kind() == reflect.Map || f.Type.Kind() == reflect.Slice {
			continue
		}
		name := "SUNDIAL_" + strings.ToUpper(key)
		val, ok := lookup(name)
		if !ok {
			continue
		}
		if err := yaml.Unmarshal([]byte(val), v.Field(i).Addr().Interface()); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, val, err))
		}
	}
	return errors.Join(errs...)
}

func setString(c *cli.Context, flag string, dst *string) {
	if c.IsSet(flag) {
		*dst = c.String(flag)
	}
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	return cfg.Build()
}
