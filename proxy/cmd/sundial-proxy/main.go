// Command sundial-proxy runs one Sundial proxy. Configuration comes from a
// YAML file (--config), overridden by SUNDIAL_* environment variables,
// overridden by flags.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"

	"github.com/sundialmq/sundial/proto/healthcheck"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy"
)

// fileConfig is the YAML shape of the config file (see
// proxy/config.example.yaml); proxy.Config documents each setting.
type fileConfig struct {
	GRPCAddr           string        `yaml:"grpc_addr"`
	HTTPAddr           string        `yaml:"http_addr"`
	AdminAddr          string        `yaml:"admin_addr"`
	MetricsAddr        string        `yaml:"metrics_addr"`
	AllowedHosts       []string      `yaml:"allowed_hosts"`
	AllowedOrigins     []string      `yaml:"allowed_origins"`
	ListenLimits       fileListen    `yaml:"listen_limits"`
	Brokers            []string      `yaml:"brokers"`
	ForwardTimeout     time.Duration `yaml:"forward_timeout"`
	ReadyProbeInterval time.Duration `yaml:"ready_probe_interval"`
	WatchSilence       time.Duration `yaml:"watch_silence_timeout"`
	LogLevel           string        `yaml:"log_level"`
	Limits             fileLimits    `yaml:"limits"`
	Insecure           bool          `yaml:"insecure"`
	TLSCertFile        string        `yaml:"tls_cert_file"`
	TLSKeyFile         string        `yaml:"tls_key_file"`
	TLSClientCAFile    string        `yaml:"tls_client_ca_file"`
	ClusterCertFile    string        `yaml:"cluster_cert_file"`
	ClusterKeyFile     string        `yaml:"cluster_key_file"`
	ClusterCAFile      string        `yaml:"cluster_ca_file"`
	Auth               fileAuth      `yaml:"auth"`
	Quotas             fileQuotas    `yaml:"quotas"`
}

// fileQuotas is proxy.Quotas in the config file.
type fileQuotas struct {
	PublishRate           float64 `yaml:"publish_rate"`
	PublishBurst          int     `yaml:"publish_burst"`
	ReceiveRate           float64 `yaml:"receive_rate"`
	ReceiveBurst          int     `yaml:"receive_burst"`
	TopicCreatesPerMinute int     `yaml:"topic_creates_per_minute"`
	GroupCreatesPerMinute int     `yaml:"group_creates_per_minute"`
}

// fileAuth is proxy.AuthConfig in the config file.
type fileAuth struct {
	Enabled            bool                `yaml:"enabled"`
	BootstrapTokenFile string              `yaml:"bootstrap_token_file"`
	CertPrincipals     []fileCertPrincipal `yaml:"cert_principals"`
}

type fileCertPrincipal struct {
	Subject   string `yaml:"subject"`
	Principal string `yaml:"principal"`
	Role      string `yaml:"role"`
}

// fileLimits is validate.Limits in the config file.
type fileLimits struct {
	MaxMessageBytes int64         `yaml:"max_message_bytes"`
	MaxDelay        time.Duration `yaml:"max_delay"`
	MaxKeyBytes     int           `yaml:"max_key_bytes"`
	MaxBatch        int           `yaml:"max_batch"`
	MaxHeaderBytes  int           `yaml:"max_header_bytes"`
	MaxReceipts     int           `yaml:"max_receipts"`
}

// fileListen is proxy.ListenLimits in the config file.
type fileListen struct {
	MaxConnections           int           `yaml:"max_connections"`
	HTTPReadHeaderTimeout    time.Duration `yaml:"http_read_header_timeout"`
	HTTPReadTimeout          time.Duration `yaml:"http_read_timeout"`
	HTTPWriteTimeout         time.Duration `yaml:"http_write_timeout"`
	HTTPIdleTimeout          time.Duration `yaml:"http_idle_timeout"`
	GRPCMaxConcurrentStreams uint32        `yaml:"grpc_max_concurrent_streams"`
	GRPCMaxRecvMsgBytes      int           `yaml:"grpc_max_recv_msg_bytes"`
	GRPCMaxHeaderListBytes   uint32        `yaml:"grpc_max_header_list_bytes"`
	GRPCKeepaliveMinTime     time.Duration `yaml:"grpc_keepalive_min_time"`
}

// decodeFile sets the settings data names over cfg and level. Keys are
// checked: a key that is no setting (a misspelling) is an error naming it.
func decodeFile(data []byte, cfg *proxy.Config, level *string) error {
	fc := fileConfig{
		GRPCAddr: cfg.GRPCAddr, HTTPAddr: cfg.HTTPAddr, Brokers: cfg.Brokers, ForwardTimeout: cfg.ForwardTimeout,
		AdminAddr: cfg.AdminAddr, MetricsAddr: cfg.MetricsAddr, AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins,
		ListenLimits:       fileListen(cfg.ListenLimits),
		ReadyProbeInterval: cfg.ReadyProbeInterval, WatchSilence: cfg.WatchSilenceTimeout, LogLevel: *level, Insecure: cfg.Insecure,
		TLSCertFile: cfg.TLSCertFile, TLSKeyFile: cfg.TLSKeyFile, TLSClientCAFile: cfg.TLSClientCAFile,
		ClusterCertFile: cfg.ClusterCertFile, ClusterKeyFile: cfg.ClusterKeyFile, ClusterCAFile: cfg.ClusterCAFile,
		Auth:   fileAuth{Enabled: cfg.Auth.Enabled, BootstrapTokenFile: cfg.Auth.BootstrapTokenFile},
		Quotas: fileQuotas(cfg.Quotas),
		Limits: fileLimits{
			MaxMessageBytes: cfg.Limits.MaxMessageBytes, MaxDelay: cfg.Limits.MaxDelay, MaxKeyBytes: cfg.Limits.MaxKeyBytes,
			MaxBatch: cfg.Limits.MaxBatch, MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, MaxReceipts: cfg.Limits.MaxReceipts,
		},
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Brokers, *level = fc.GRPCAddr, fc.HTTPAddr, fc.Brokers, fc.LogLevel
	cfg.AdminAddr, cfg.MetricsAddr, cfg.AllowedHosts, cfg.AllowedOrigins = fc.AdminAddr, fc.MetricsAddr, fc.AllowedHosts, fc.AllowedOrigins
	cfg.ListenLimits = proxy.ListenLimits(fc.ListenLimits)
	cfg.ForwardTimeout, cfg.ReadyProbeInterval, cfg.WatchSilenceTimeout = fc.ForwardTimeout, fc.ReadyProbeInterval, fc.WatchSilence
	cfg.Insecure = fc.Insecure
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = fc.TLSCertFile, fc.TLSKeyFile, fc.TLSClientCAFile
	cfg.ClusterCertFile, cfg.ClusterKeyFile, cfg.ClusterCAFile = fc.ClusterCertFile, fc.ClusterKeyFile, fc.ClusterCAFile
	cfg.Auth.Enabled, cfg.Auth.BootstrapTokenFile = fc.Auth.Enabled, fc.Auth.BootstrapTokenFile
	cfg.Quotas = proxy.Quotas(fc.Quotas)
	for _, r := range fc.Auth.CertPrincipals {
		cfg.Auth.CertPrincipals = append(cfg.Auth.CertPrincipals, proxy.CertPrincipal(r))
	}
	cfg.Limits = validate.Limits{
		MaxMessageBytes: fc.Limits.MaxMessageBytes, MaxDelay: fc.Limits.MaxDelay, MaxKeyBytes: fc.Limits.MaxKeyBytes,
		MaxBatch: fc.Limits.MaxBatch, MaxHeaderBytes: fc.Limits.MaxHeaderBytes, MaxReceipts: fc.Limits.MaxReceipts,
	}
	return nil
}

// exitUsage is the exit code for bad configuration.
const exitUsage = 2

func main() {
	app := &cli.App{
		Name:  "sundial-proxy",
		Usage: "stateless front end of a Sundial cluster",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML config file"},
			&cli.StringFlag{Name: "grpc-addr", Usage: "gRPC listen address (default 127.0.0.1:7400)"},
			&cli.StringFlag{Name: "http-addr", Usage: "HTTP listen address for the HTTP/JSON API (/v1/, /openapi.json, /docs), the UI, /metrics, /livez and /readyz (default 127.0.0.1:7480)"},
			&cli.StringFlag{Name: "admin-addr", Usage: "listen address for pprof (/debug/pprof/); keep it on loopback; \"off\" disables it (default 127.0.0.1:7481)"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve /metrics on this address instead of the HTTP address (default: on the HTTP address)"},
			&cli.StringFlag{Name: "brokers", Usage: "comma-separated seed broker gRPC addresses"},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error (default info)"},
			&cli.BoolFlag{Name: "insecure", EnvVars: []string{"SUNDIAL_INSECURE"}, Usage: "serve without TLS on non-loopback addresses (refused otherwise); logs a warning and shows it on /readyz"},
			&cli.StringFlag{Name: "tls-cert-file", EnvVars: []string{"SUNDIAL_TLS_CERT_FILE"}, Usage: "PEM certificate for clients: gRPC and HTTP serve only TLS (reloaded when it changes)"},
			&cli.StringFlag{Name: "tls-key-file", EnvVars: []string{"SUNDIAL_TLS_KEY_FILE"}, Usage: "PEM key of --tls-cert-file"},
			&cli.BoolFlag{Name: "auth", EnvVars: []string{"SUNDIAL_AUTH"}, Usage: "require a bearer token (or a mapped client certificate) whose role allows each call; sign receipts"},
			&cli.StringFlag{Name: "bootstrap-token-file", EnvVars: []string{"SUNDIAL_BOOTSTRAP_TOKEN_FILE"}, Usage: "file with the first admin token's secret, stored once per cluster as token \"bootstrap\" (needs --auth)"},
			&cli.StringFlag{Name: "tls-client-ca-file", EnvVars: []string{"SUNDIAL_TLS_CLIENT_CA_FILE"}, Usage: "PEM CA: clients must present a certificate it signed"},
			&cli.StringFlag{Name: "cluster-cert-file", EnvVars: []string{"SUNDIAL_CLUSTER_CERT_FILE"}, Usage: "PEM certificate of the cluster CA presented to brokers"},
			&cli.StringFlag{Name: "cluster-key-file", EnvVars: []string{"SUNDIAL_CLUSTER_KEY_FILE"}, Usage: "PEM key of --cluster-cert-file"},
			&cli.StringFlag{Name: "cluster-ca-file", EnvVars: []string{"SUNDIAL_CLUSTER_CA_FILE"}, Usage: "PEM cluster CA that brokers' certificates are verified against"},
			&cli.Float64Flag{Name: "publish-rate", EnvVars: []string{"SUNDIAL_PUBLISH_RATE"}, Usage: "messages per second one principal may publish; 0 is no limit (default 0)"},
			&cli.Float64Flag{Name: "receive-rate", EnvVars: []string{"SUNDIAL_RECEIVE_RATE"}, Usage: "deliveries per second one principal may receive (Receive and Subscribe); 0 is no limit (default 0)"},
			&cli.IntFlag{Name: "topic-creates-per-minute", EnvVars: []string{"SUNDIAL_TOPIC_CREATES_PER_MINUTE"}, Usage: "topics one principal may create a minute by publishing to them; 0 is no limit (default 60)"},
			&cli.IntFlag{Name: "group-creates-per-minute", EnvVars: []string{"SUNDIAL_GROUP_CREATES_PER_MINUTE"}, Usage: "groups one principal may create a minute by a first Receive or Subscribe; 0 is no limit (default 60)"},
			&cli.StringFlag{Name: "probe", Usage: "only GET this URL (e.g. http://127.0.0.1:7480/readyz) and exit 0 on 200, 1 otherwise: a container health check"},
		},
		Action: run,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "sundial-proxy:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

func run(c *cli.Context) error {
	if url := c.String("probe"); url != "" {
		return healthcheck.Probe(url)
	}
	cfg, level, err := load(c)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return cli.Exit(fmt.Sprintf("log_level: want debug, info, warn or error, got %q", level), exitUsage)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	log, err := zc.Build()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := proxy.New(cfg, log, reg)
	if err != nil {
		return cli.Exit(err.Error(), exitUsage)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		log.Info("signal received, stopping")
	case err = <-srv.Err():
	}
	srv.Stop()
	return err
}

// load builds the config: defaults, then the YAML file, then SUNDIAL_*
// environment variables, then flags.
func load(c *cli.Context) (proxy.Config, string, error) {
	cfg := proxy.DefaultConfig()
	level := "info"
	if path := c.String("config"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, "", fmt.Errorf("config: %w", err)
		}
		if err := decodeFile(b, &cfg, &level); err != nil {
			return cfg, "", fmt.Errorf("config %s: %w", path, err)
		}
	}
	set(&cfg.GRPCAddr, os.Getenv("SUNDIAL_GRPC_ADDR"))
	set(&cfg.HTTPAddr, os.Getenv("SUNDIAL_HTTP_ADDR"))
	set(&cfg.AdminAddr, os.Getenv("SUNDIAL_ADMIN_ADDR"))
	set(&cfg.MetricsAddr, os.Getenv("SUNDIAL_METRICS_ADDR"))
	if v := os.Getenv("SUNDIAL_BROKERS"); v != "" {
		cfg.Brokers = splitList(v)
	}
	set(&level, os.Getenv("SUNDIAL_LOG_LEVEL"))
	set(&cfg.GRPCAddr, c.String("grpc-addr"))
	set(&cfg.HTTPAddr, c.String("http-addr"))
	set(&cfg.AdminAddr, c.String("admin-addr"))
	set(&cfg.MetricsAddr, c.String("metrics-addr"))
	if cfg.AdminAddr == "off" {
		cfg.AdminAddr = ""
	}
	if v := c.String("brokers"); v != "" {
		cfg.Brokers = splitList(v)
	}
	set(&level, c.String("log-level"))
	if c.IsSet("insecure") {
		cfg.Insecure = c.Bool("insecure")
	}
	set(&cfg.TLSCertFile, c.String("tls-cert-file"))
	set(&cfg.TLSKeyFile, c.String("tls-key-file"))
	set(&cfg.TLSClientCAFile, c.String("tls-client-ca-file"))
	set(&cfg.ClusterCertFile, c.String("cluster-cert-file"))
	set(&cfg.ClusterKeyFile, c.String("cluster-key-file"))
	set(&cfg.ClusterCAFile, c.String("cluster-ca-file"))
	if c.IsSet("auth") {
		cfg.Auth.Enabled = c.Bool("auth")
	}
	set(&cfg.Auth.BootstrapTokenFile, c.String("bootstrap-token-file"))
	if c.IsSet("publish-rate") {
		cfg.Quotas.PublishRate = c.Float64("publish-rate")
	}
	if c.IsSet("receive-rate") {
		cfg.Quotas.ReceiveRate = c.Float64("receive-rate")
	}
	if c.IsSet("topic-creates-per-minute") {
		cfg.Quotas.TopicCreatesPerMinute = c.Int("topic-creates-per-minute")
	}
	if c.IsSet("group-creates-per-minute") {
		cfg.Quotas.GroupCreatesPerMinute = c.Int("group-creates-per-minute")
	}
	return cfg, level, cfg.Validate()
}

func set(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
