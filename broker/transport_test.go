package broker

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"
)

// A broker with TLS files serves gRPC only over TLS and only to clients
// presenting a certificate of the cluster CA, and serves its replaced
// certificate files to new connections without a restart.
func TestBrokerTLSAcceptsOnlyTheClusterCA(t *testing.T) {
	ca, other := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "other")
	dir := t.TempDir()
	files := ca.Broker(dir, "1")
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr, cfg.AdminAddr, cfg.DataDir = free(), free(), "127.0.0.1:0", "", t.TempDir()
	cfg.InitialMembers = map[uint64]Member{1: {RaftAddr: cfg.RaftAddr, GRPCAddr: cfg.GRPCAddr}}
	cfg.Shards, cfg.RTT, cfg.CacheBytes, cfg.MemTableBytes = 1, 10*time.Millisecond, 1<<20, 1<<20
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = files.CertFile, files.KeyFile, files.CAFile
	reg := prometheus.NewRegistry()
	b, err := New(cfg, zaptest.NewLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	check := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		return err
	}
	clientOf := func(f tlsfiles.Files) credentials.TransportCredentials {
		src, err := tlsfiles.New("cluster", f, 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(src.ClientConfig())
	}
	if err := check(insecure.NewCredentials()); err == nil {
		t.Error("a plaintext client's health check was answered, want refused")
	}
	rogue := other.Issue(t.TempDir(), "rogue")
	rogue.CAFile = ca.CAFile
	if err := check(clientOf(rogue)); err == nil {
		t.Error("a client with a certificate of another CA was answered, want refused")
	}
	if err := check(clientOf(tlsfiles.Files{CAFile: ca.CAFile})); err == nil {
		t.Error("a client without a certificate was answered, want refused")
	}
	if err := check(b.tls.peer); err != nil {
		t.Fatalf("the credentials the broker calls its peers with: %v, want answered", err)
	}
	proxyFiles := ca.Proxy(t.TempDir(), "proxy")
	if err := check(clientOf(proxyFiles)); err != nil {
		t.Fatalf("a client with a cluster-CA certificate: %v, want answered", err)
	}

	// The metrics port serves TLS with the broker's certificate, to
	// clients without one too (Prometheus, probes), and no plaintext.
	caPool := x509.NewCertPool()
	caPEM, err := os.ReadFile(ca.CAFile)
	if err != nil || !caPool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("read the CA: %v", err)
	}
	httpsc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool, MinVersion: tls.VersionTLS12}}}
	if resp, err := httpsc.Get("https://" + b.MetricsAddr() + "/livez"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET https://%s/livez = %v %v, want 200 over TLS", b.MetricsAddr(), resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, err := http.Get("http://" + b.MetricsAddr() + "/livez"); err == nil && resp.StatusCode == http.StatusOK {
		resp.Body.Close()
		t.Errorf("GET http://%s/livez answered 200 in plaintext, want refused", b.MetricsAddr())
	}

	// The peer and membership APIs answer brokers only: a proxy's
	// certificate, or a cluster-CA one naming no principal, is refused
	// PermissionDenied before the handler runs (and counted); a broker's
	// reaches the handler (which refuses a shard it does not host).
	membership := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = brokerv1.NewPeerClient(conn).ChangeShardMembership(t.Context(), &brokerv1.ChangeShardMembershipRequest{
			ShardId: 9999, ReplicaId: 77, RaftAddr: "127.0.0.1:1", Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_NON_VOTING,
		})
		return err
	}
	unnamed := ca.Issue(t.TempDir(), "unnamed")
	for name, f := range map[string]tlsfiles.Files{"a proxy's": proxyFiles, "an unnamed": unnamed} {
		if err := membership(clientOf(f)); status.Code(err) != codes.PermissionDenied {
			t.Errorf("ChangeShardMembership with %s certificate: %v, want PermissionDenied", name, err)
		}
	}
	if err := membership(b.tls.peer); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ChangeShardMembership with the broker's certificate: %v, want FailedPrecondition (shard 9999 not hosted)", err)
	}
	if got := refusals(t, reg, "not_broker"); got != 2 {
		t.Errorf("sundial_broker_refused_total{reason=not_broker} = %v, want 2", got)
	}

	serial := func() *big.Int {
		cert, err := tls.LoadX509KeyPair(proxyFiles.CertFile, proxyFiles.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", b.GRPCAddr(), &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // only the serial is looked at
			Certificates:       []tls.Certificate{cert}, NextProtos: []string{"h2"},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	before := serial()
	ca.Broker(dir, "1") // rotated in place
	for serial().Cmp(before) == 0 {
		time.Sleep(100 * time.Millisecond) // the files are looked at once a second
	}
	if err := check(clientOf(proxyFiles)); err != nil {
		t.Fatalf("after the rotation a cluster-CA client: %v, want answered", err)
	}
	// The metrics port takes the rotated certificate too.
	c, err := tls.Dial("tcp", b.MetricsAddr(), &tls.Config{RootCAs: caPool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to the metrics port after the rotation: %v", err)
	}
	defer c.Close()
	if got, want := c.ConnectionState().PeerCertificates[0].SerialNumber, serial(); got.Cmp(want) != 0 {
		t.Errorf("the metrics port serves certificate %v after the rotation, the gRPC port %v: want the same, new one", got, want)
	}
}

// refusals is sundial_broker_refused_total{reason} on reg.
func refusals(t *testing.T, reg prometheus.Gatherer, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sundial_broker_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A Raft CA file that holds no certificate stops the broker before it
// starts, naming the setting (Dragonboat would say only "failed to
// append certs"); a missing one does too.
func TestRaftCAFileIsCheckedAtStart(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster")
	files := ca.Broker(t.TempDir(), "1")
	notPEM := t.TempDir() + "/brokers-ca.pem"
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, raftCA := range []string{notPEM, t.TempDir() + "/missing.pem"} {
		cfg := DefaultConfig()
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile, cfg.TLSRaftCAFile = files.CertFile, files.KeyFile, files.CAFile, raftCA
		_, err := newTransport(cfg, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "tls_raft_ca_file") {
			t.Errorf("newTransport(tls_raft_ca_file %s) error = %v, want one naming tls_raft_ca_file", raftCA, err)
		}
	}
	cfg := DefaultConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile, cfg.TLSRaftCAFile = files.CertFile, files.KeyFile, files.CAFile, ca.Intermediate("brokers").SignerFile
	if _, err := newTransport(cfg, nil, nil); err != nil {
		t.Errorf("newTransport(an intermediate's certificate as tls_raft_ca_file) error = %v, want none", err)
	}
}
