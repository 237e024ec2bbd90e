package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/validate"
	"github.com/sundialmq/sundial/proxy/internal/quota"
)

// Config configures one proxy. Flags, environment and YAML map onto it in
// cmd/sundial-proxy only.
type Config struct {
	// GRPCAddr is the host:port the public gRPC API listens on; port 0
	// picks a free port (see Server.GRPCAddr). Default 127.0.0.1:7400.
	GRPCAddr string
	// HTTPAddr is the host:port serving the HTTP/JSON API (/v1/...,
	// /openapi.json, /docs), the admin UI at /ui/, /livez, /readyz,
	// /healthz (an alias of /readyz) and, unless MetricsAddr is set,
	// /metrics; port 0 picks a free port; empty disables HTTP. Default
	// 127.0.0.1:7480.
	HTTPAddr string
	// AdminAddr is the host:port serving pprof (/debug/pprof/...), apart
	// from the public ports so that only the operator reaches it: keep it
	// on loopback. Empty disables it. Default 127.0.0.1:7481.
	AdminAddr string
	// MetricsAddr, when set, serves /metrics on its own host:port instead
	// of on HTTPAddr (e.g. a private interface Prometheus scrapes). Empty
	// (the default) keeps /metrics on HTTPAddr, where the deploy/
	// Prometheus configs scrape it; it shows counts and names, no payloads.
	MetricsAddr string
	// AllowedHosts are the names (without port) the HTTP API, the UI and
	// /docs answer to in the Host header; any other is refused 421, which
	// stops DNS rebinding. "*" allows any name. Empty means localhost, every
	// loopback address, the host of HTTPAddr and the machine's hostname.
	AllowedHosts []string
	// AllowedOrigins are browser origins (scheme://host[:port]) whose
	// cross-site requests the HTTP API accepts; other cross-site requests
	// (Sec-Fetch-Site: cross-site, or an Origin that is not the proxy's
	// own) are refused 403. Default none.
	AllowedOrigins []string
	// ListenLimits bound connections, HTTP timeouts and gRPC streams per
	// connection; zero fields mean the defaults of DefaultListenLimits.
	// YAML: the listen_limits section.
	ListenLimits ListenLimits
	// Brokers are seed broker gRPC addresses. The proxy watches the routing
	// table from one of them and learns the rest of the cluster from it.
	// Default 127.0.0.1:7501, 127.0.0.1:7502, 127.0.0.1:7503.
	Brokers []string
	// ForwardTimeout bounds one forwarded call including its retries
	// across replicas; the caller's deadline, if sooner, wins. Default 10s.
	ForwardTimeout time.Duration
	// ReadyProbeInterval is how often the proxy checks that it reaches the
	// leader of every event shard (each probe waits at most this long);
	// /readyz answers the latest round. While not ready it probes every
	// 200ms (or this interval, if shorter), so that it turns ready soon
	// after the cluster does. Default 2s.
	ReadyProbeInterval time.Duration
	// WatchSilenceTimeout bounds how long the broker the proxy follows the
	// routing table from may stay silent: the proxy asks it for a progress
	// frame every quarter of this, and after this long without any frame
	// (a frozen broker whose connection stays open) it watches another
	// broker, keeping its table meanwhile, and /readyz says not ready until
	// a watch is live again. 0 asks for no progress frames: gRPC keepalive
	// (about 12 s) alone ends such a watch. Brokers older than progress
	// frames send none and are not judged. Default 2s.
	WatchSilenceTimeout time.Duration
	// Limits bound client requests; a request beyond them is refused with
	// InvalidArgument before it is forwarded. Zero fields mean the defaults
	// of validate.DefaultLimits. YAML: the limits section (max_message_bytes,
	// max_delay, max_key_bytes, max_batch, max_header_bytes, max_receipts).
	Limits validate.Limits

	// Quotas limit each principal's publish and receive rates and the
	// topics and groups it creates implicitly; zero fields are no limit,
	// except TopicCreatesPerMinute and GroupCreatesPerMinute, whose
	// defaults are 60. A principal is an
	// authenticated caller, or the client's address with auth off. YAML:
	// the quotas section (publish_rate, publish_burst, receive_rate,
	// receive_burst, topic_creates_per_minute, group_creates_per_minute);
	// docs/security.md.
	Quotas Quotas

	// Transport security (see docs/security.md).

	// Insecure lets the proxy serve without TLS on non-loopback addresses;
	// without it a GRPCAddr or HTTPAddr that is not loopback (127.0.0.1,
	// ::1, localhost) is refused at start. The proxy logs a warning at
	// start and shows it in /readyz's body. Default false.
	Insecure bool
	// TLSCertFile and TLSKeyFile are the proxy's client-facing certificate
	// (PEM) and key: with them the gRPC and HTTP listeners serve only TLS
	// 1.2 or later. Set both or neither; reloaded when they change.
	// Default empty: plaintext.
	TLSCertFile string
	TLSKeyFile  string
	// TLSClientCAFile, when set (with TLSCertFile), makes both listeners
	// require a client certificate signed by this CA (PEM); the admin UI's
	// own calls present TLSCertFile, so that CA must accept it too.
	// Default empty: no client certificates.
	TLSClientCAFile string
	// ClusterCertFile and ClusterKeyFile are the proxy's certificate of the
	// cluster CA (PEM) and key, presented to brokers; ClusterCAFile is that
	// CA, which brokers' certificates are verified against. Brokers with
	// TLS accept only such clients. Reloaded when they change. Default
	// empty: plaintext to brokers.
	ClusterCertFile string
	ClusterKeyFile  string
	ClusterCAFile   string

	// Auth turns authentication and per-topic permissions on; see
	// AuthConfig. Default off.
	Auth AuthConfig
}

// Quotas are the per-principal rate limits (see Config.Quotas).
type Quotas = quota.Config

// DefaultConfig is the configuration of a proxy in front of the local
// three-broker cluster.
func DefaultConfig() Config {
	return Config{
		GRPCAddr:            "127.0.0.1:7400",
		HTTPAddr:            "127.0.0.1:7480",
		AdminAddr:           "127.0.0.1:7481",
		Brokers:             []string{"127.0.0.1:7501", "127.0.0.1:7502", "127.0.0.1:7503"},
		ForwardTimeout:      10 * time.Second,
		ReadyProbeInterval:  2 * time.Second,
		WatchSilenceTimeout: 2 * time.Second,
		Limits:              validate.DefaultLimits(),
		ListenLimits:        DefaultListenLimits(),
		Quotas:              Quotas{TopicCreatesPerMinute: 60, GroupCreatesPerMinute: 60},
	}
}

// Validate reports every problem with c, naming the field to fix.
func (c Config) Validate() error {
	var errs []error
	if err := checkAddr(c.GRPCAddr); err != nil {
		errs = append(errs, fmt.Errorf("grpc_addr: %w", err))
	}
	if c.HTTPAddr != "" {
		if err := checkAddr(c.HTTPAddr); err != nil {
			errs = append(errs, fmt.Errorf("http_addr: %w", err))
		}
	}
	for _, a := range []struct{ name, addr string }{{"admin_addr", c.AdminAddr}, {"metrics_addr", c.MetricsAddr}} {
		if a.addr != "" {
			if err := checkAddr(a.addr); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.name, err))
			}
		}
	}
	for i, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("allowed_origins[%d]: want scheme://host[:port], got %q", i, o))
		}
	}
	if err := c.ListenLimits.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Quotas.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("brokers: at least one seed broker address is required"))
	}
	for i, b := range c.Brokers {
		if err := checkAddr(b); err != nil {
			errs = append(errs, fmt.Errorf("brokers[%d]: %w", i, err))
		}
	}
	if c.ForwardTimeout <= 0 {
		errs = append(errs, fmt.Errorf("forward_timeout: must be positive, got %s", c.ForwardTimeout))
	}
	if c.ReadyProbeInterval <= 0 {
		errs = append(errs, fmt.Errorf("ready_probe_interval: must be positive, got %s", c.ReadyProbeInterval))
	}
	if c.WatchSilenceTimeout < 0 {
		errs = append(errs, fmt.Errorf("watch_silence_timeout: must not be negative, got %s", c.WatchSilenceTimeout))
	}
	errs = append(errs, c.validateTLS()...)
	errs = append(errs, c.Auth.validate()...)
	l := c.Limits
	if l.MaxMessageBytes < 0 || l.MaxDelay < 0 || l.MaxKeyBytes < 0 || l.MaxBatch < 0 || l.MaxHeaderBytes < 0 || l.MaxReceipts < 0 {
		errs = append(errs, errors.New("limits: must not be negative"))
	}
	return errors.Join(errs...)
}

func checkAddr(addr string) error {
	if addr == "" {
		return errors.New("must not be empty")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("want host:port, got %q", addr)
	}
	return nil
}

// validateTLS checks the transport security settings: file pairs, and
// listeners without TLS on loopback unless Insecure.
func (c Config) validateTLS() []error {
	var errs []error
	if err := c.clientTLSFiles().Check("tls"); err != nil {
		errs = append(errs, err)
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("tls_client_ca_file: needs tls_cert_file and tls_key_file: client certificates are asked for over TLS"))
	}
	if err := c.clusterTLSFiles().Check("cluster"); err != nil {
		errs = append(errs, err)
	}
	if c.ClusterCertFile != "" && c.ClusterCAFile == "" {
		errs = append(errs, errors.New("cluster_ca_file: must be set with cluster_cert_file, to verify the brokers' certificates"))
	}
	grpcListen := tlsfiles.Listener{Setting: "grpc_addr", Addr: c.GRPCAddr}
	httpListen := tlsfiles.Listener{Setting: "http_addr", Addr: c.HTTPAddr}
	if c.TLSCertFile != "" {
		grpcListen.Addr, httpListen.Addr = "", "" // served with TLS
	}
	// pprof and a separate /metrics listener are plaintext even with TLS on.
	adminListen := tlsfiles.Listener{Setting: "admin_addr", Addr: c.AdminAddr}
	metricsListen := tlsfiles.Listener{Setting: "metrics_addr", Addr: c.MetricsAddr}
	if err := tlsfiles.RequireLoopback(c.Insecure, grpcListen, httpListen, adminListen, metricsListen); err != nil {
		errs = append(errs, err)
	}
	return errs
}
