package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlsmetrics"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"
)

// serve accepts TLS connections on loopback with cfg, completing each
// handshake, until the test ends; it answers the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if tc, ok := c.(*tls.Conn); ok && tc.Handshake() == nil {
					_, _ = c.Write([]byte("x")) // the client reads it: the server accepted the handshake
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// dial completes a handshake and reads the server's byte (which a server
// that refused the client certificate never sends), answering the
// server's leaf certificate.
func dial(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func source(t *testing.T, name string, f tlsfiles.Files, m tlsfiles.Counter) *tlsfiles.Source {
	t.Helper()
	s, err := tlsfiles.New(name, f, time.Nanosecond, m, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A server requiring client certificates of its CA takes a client of that
// CA and refuses one without a certificate and one of another CA.
func TestServerRequiresAClientCertificateOfItsCA(t *testing.T) {
	ca, other := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "other")
	dir := t.TempDir()
	srv := source(t, "cluster", ca.Issue(dir, "broker"), nil)
	addr := serve(t, srv.ServerConfig(tls.RequireAndVerifyClientCert))

	if _, err := dial(addr, source(t, "cluster", ca.Issue(dir, "proxy"), nil).ClientConfig()); err != nil {
		t.Fatalf("a client of the cluster CA: %v, want accepted", err)
	}
	foreign := other.Issue(t.TempDir(), "rogue")
	foreign.CAFile = ca.CAFile // it trusts the cluster, the cluster does not trust it
	if _, err := dial(addr, source(t, "cluster", foreign, nil).ClientConfig()); err == nil {
		t.Fatal("a client with a certificate of another CA was accepted, want refused")
	}
	if _, err := dial(addr, source(t, "cluster", tlsfiles.Files{CAFile: ca.CAFile}, nil).ClientConfig()); err == nil {
		t.Fatal("a client without a certificate was accepted, want refused")
	}
	// And the client refuses a server its CA did not sign.
	rogue := serve(t, source(t, "cluster", other.Issue(t.TempDir(), "rogue-server"), nil).ServerConfig(tls.NoClientCert))
	if _, err := dial(rogue, source(t, "cluster", ca.Issue(dir, "proxy"), nil).ClientConfig()); err == nil || !strings.Contains(err.Error(), "server certificate") {
		t.Fatalf("dial a server of another CA = %v, want a server certificate error", err)
	}
}

// Files replaced on disk are served on the next connection without a
// restart; a bad file keeps the certificate loaded before, counted.
func TestReplacedFilesServeTheNewCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster")
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	m := tlsmetrics.New(reg)
	files := ca.Issue(dir, "broker")
	srv := source(t, "cluster", files, m)
	addr := serve(t, srv.ServerConfig(tls.NoClientCert))
	client := source(t, "client", tlsfiles.Files{CAFile: ca.CAFile}, nil).ClientConfig()

	first, err := dial(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	ca.Issue(dir, "broker") // a rotation: new certificate and key, same paths
	second, err := dial(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatalf("after the files were replaced a new connection got serial %v again, want the new certificate", first.SerialNumber)
	}

	if err := os.WriteFile(files.CertFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := dial(addr, client)
	if err != nil {
		t.Fatalf("dial with a bad certificate file on disk: %v, want the loaded certificate kept", err)
	}
	if third.SerialNumber.Cmp(second.SerialNumber) != 0 {
		t.Fatalf("with a bad file on disk the server sent serial %v, want the loaded %v", third.SerialNumber, second.SerialNumber)
	}
	if got := testutil.ToFloat64(m.Reloads("cluster", "error")); got < 1 {
		t.Fatalf("sundial_tls_reloads_total{files=cluster,result=error} = %v, want at least 1", got)
	}
}

// New refuses files it cannot load, naming them.
func TestNewNamesTheBadFile(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster")
	f := ca.Issue(t.TempDir(), "broker")
	f.KeyFile = f.CertFile + ".missing"
	if _, err := tlsfiles.New("cluster", f, 0, nil, nil); err == nil || !strings.Contains(err.Error(), f.KeyFile) {
		t.Fatalf("New(missing key file) = %v, want an error naming %s", err, f.KeyFile)
	}
	bad := tlsfiles.Files{CAFile: f.CertFile + ".missing"}
	if _, err := tlsfiles.New("cluster", bad, 0, nil, nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New(missing CA file) = %v, want not exist", err)
	}
}
