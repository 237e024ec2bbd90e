package proxy

import (
	"crypto/tls"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"
)

// A proxy without TLS refuses to start on an address other than loopback,
// naming the setting and the way out; started insecure, it serves there and
// says so on /readyz.
func TestProxyWithoutTLSListensOnlyOnLoopbackUnlessInsecure(t *testing.T) {
	_, broker := oneShardBroker(t, true)
	for _, setting := range []string{"grpc_addr", "http_addr"} {
		cfg := DefaultConfig()
		cfg.AdminAddr = "" // no pprof listener: tests run side by side
		cfg.GRPCAddr, cfg.HTTPAddr, cfg.Brokers = "127.0.0.1:0", "127.0.0.1:0", []string{broker}
		if setting == "grpc_addr" {
			cfg.GRPCAddr = "0.0.0.0:0"
		} else {
			cfg.HTTPAddr = "0.0.0.0:0"
		}
		srv, err := New(cfg, zaptest.NewLogger(t), nil)
		if err == nil {
			srv.Stop()
			t.Fatalf("New(%s 0.0.0.0:0, no TLS, not insecure) = nil error, want a refusal", setting)
		}
		if msg := err.Error(); !strings.Contains(msg, setting+": 0.0.0.0:0 is not a loopback address") || !strings.Contains(msg, "--insecure") {
			t.Errorf("New(%s 0.0.0.0:0) error = %q, want it to name %s and --insecure", setting, msg, setting)
		}
	}

	srv := startProxy(t, broker, func(c *Config) { c.HTTPAddr, c.Insecure = "0.0.0.0:0", true })
	_, port, err := net.SplitHostPort(srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	var code int
	var body string
	waitFor(t, "/readyz 200 on the insecure proxy", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return code == http.StatusOK
	})
	if !strings.Contains(body, tlsfiles.InsecureWarning) {
		t.Errorf("/readyz of an insecure proxy = %d %q, want the warning %q", code, body, tlsfiles.InsecureWarning)
	}
}

// A proxy with TLS files serves gRPC and HTTP only over TLS, to clients
// with a certificate of its client CA, calls a broker that requires the
// cluster CA with its cluster certificate, and serves its replaced
// certificate files to new connections without a restart.
func TestProxyTLSOnEveryHop(t *testing.T) {
	cluster, public := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "public")
	brokerSrc, err := tlsfiles.New("cluster", cluster.Issue(t.TempDir(), "broker-1"), 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{leader: true, published: map[uint64]int{}, progress: true}
	broker := serve(t, b, grpc.Creds(credentials.NewTLS(brokerSrc.ServerConfig(tls.RequireAndVerifyClientCert, "h2"))))
	b.table = func() *sundialv1.RoutingTable { return oneShardTable(broker) }

	dir := t.TempDir()
	serverFiles := public.Issue(dir, "proxy")
	clusterFiles := cluster.Issue(t.TempDir(), "proxy-cluster")
	srv := startProxy(t, broker, func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = serverFiles.CertFile, serverFiles.KeyFile, public.CAFile
		c.ClusterCertFile, c.ClusterKeyFile, c.ClusterCAFile = clusterFiles.CertFile, clusterFiles.KeyFile, cluster.CAFile
		c.GRPCAddr, c.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	})

	user := public.Issue(t.TempDir(), "user")
	userSrc, err := tlsfiles.New("client", user, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: userSrc.ClientConfig()}}
	get := func(c *http.Client, url string) (int, string) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Ready means the proxy reached the TLS broker with its cluster
	// certificate (the routing watch and the leader's health check).
	waitFor(t, "/readyz 200 over HTTPS with the broker behind TLS", func() bool {
		code, _ := get(https, "https://"+srv.HTTPAddr()+"/readyz")
		return code == http.StatusOK
	})
	// The admin UI calls the proxy's own gRPC listener over TLS; the fake
	// broker behind it has no Admin service, so its answer is Unimplemented
	// (a UI call refused by the listener would say Unavailable).
	if code, body := get(https, "https://"+srv.HTTPAddr()+"/ui/topics"); !strings.Contains(body, "unknown service sundial.v1.Admin") {
		t.Errorf("GET /ui/topics over HTTPS = %d %q, want the broker's Unimplemented answer", code, body)
	}
	if code, body := get(http.DefaultClient, "http://"+srv.HTTPAddr()+"/readyz"); code == http.StatusOK {
		t.Errorf("plaintext GET /readyz = %d %q, want refused", code, body)
	}
	anon, err := tlsfiles.New("client", tlsfiles.Files{CAFile: public.CAFile}, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(&http.Client{Transport: &http.Transport{TLSClientConfig: anon.ClientConfig()}}, "https://"+srv.HTTPAddr()+"/readyz"); code != 0 {
		t.Errorf("GET /readyz over HTTPS without a client certificate = %d, want the handshake refused", code)
	}

	healthOver := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err
	}
	if err := healthOver(insecure.NewCredentials()); err == nil {
		t.Error("a plaintext gRPC client was answered, want refused")
	}
	if err := healthOver(credentials.NewTLS(anon.ClientConfig())); err == nil {
		t.Error("a gRPC client without a client certificate was answered, want refused")
	}
	if err := healthOver(credentials.NewTLS(userSrc.ClientConfig())); err != nil {
		t.Fatalf("a gRPC client with a certificate of the client CA: %v, want answered", err)
	}

	serial := func() *big.Int {
		conn, err := tls.Dial("tcp", srv.HTTPAddr(), userSrc.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	before := serial()
	public.Issue(dir, "proxy") // rotated in place
	for serial().Cmp(before) == 0 {
		time.Sleep(100 * time.Millisecond) // the files are looked at once a second
	}
	if err := healthOver(credentials.NewTLS(userSrc.ClientConfig())); err != nil {
		t.Fatalf("after the rotation a gRPC client: %v, want answered", err)
	}
}
