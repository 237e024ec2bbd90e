// Package security runs process clusters with transport security on.
package security

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"
	"github.com/sundialmq/sundial/tests/framework"
)

// Three brokers with TLS on gRPC and mutual TLS on the Raft transport, and
// a proxy calling them with a cluster certificate, become ready (the Raft
// groups elect leaders over mTLS; the proxy follows the routing table and
// probes every leader over TLS), and stay so through a rolling restart that
// rotates every broker's certificate, the way docs/security.md says to
// rotate the files Dragonboat reads only at start. The broker certificates
// come from an intermediate CA that is the Raft transport's only trust
// (tls_raft_ca_file), so the proxy's certificate cannot speak Raft.
func TestTLSClusterAndRollingRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and restarts every broker")
	}
	ca := tlstest.NewCA(t, "cluster")
	brokers := ca.Intermediate("brokers")
	dir := t.TempDir()
	broker := brokers.Broker(dir, "broker")
	proxy := ca.Proxy(t.TempDir(), "proxy")
	c := framework.NewCluster(t, framework.Config{
		Brokers:      3,
		BrokerArgs:   append(args("--tls", broker), "--tls-raft-ca-file", brokers.SignerFile),
		ProxyArgs:    args("--cluster", proxy),
		BrokerCAFile: ca.CAFile,
	})
	infoOK := func(when string) {
		t.Helper()
		info, err := c.ClusterInfo()
		if err != nil {
			t.Fatalf("%s: ClusterInfo through the proxy: %v", when, err)
		}
		if n := len(info.GetNodes()); n != 3 {
			t.Fatalf("%s: ClusterInfo lists %d nodes, want 3", when, n)
		}
	}
	infoOK("at start")
	// Each broker counts its loads of the TLS files (docs/metrics.md; the
	// metrics test's plaintext cluster cannot serve this one), on a
	// metrics port that serves HTTPS with its certificate, not plaintext.
	for _, b := range c.Brokers {
		if err := tlsLoadsCounted(scrape(t, c, b)); err != nil {
			t.Errorf("%s: %v", b.Name, err)
		}
		if resp, err := http.Get("http://" + b.MetricsAddr + "/metrics"); err == nil { //nolint:noctx // a loopback probe
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s: its metrics port answered plaintext HTTP 200, want TLS only", b.Name)
			}
		}
	}
	// The Raft transport speaks TLS and takes only broker certificates.
	raftHandshake := func(f tlsfiles.Files) error {
		src, err := tlsfiles.New("cluster", f, 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{}, Config: src.ClientConfig()}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a plaintext listener never answers the hello
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp", c.Brokers[0].RaftAddr)
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3 servers check the client certificate after the client's
		// handshake ends: a refusal arrives on the first read, long before
		// this; an accepted peer's read just waits for Raft traffic.
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		return nil
	}
	if err := raftHandshake(broker); err != nil {
		t.Fatalf("TLS handshake with broker 1's Raft address with a broker certificate: %v, want it to complete", err)
	}
	if err := raftHandshake(proxy); err == nil {
		t.Fatal("broker 1's Raft transport took the proxy's certificate (cluster CA, not the brokers' intermediate), want refused")
	}
	rogue := tlstest.NewCA(t, "rogue").Issue(t.TempDir(), "rogue")
	rogue.CAFile = ca.CAFile
	if err := raftHandshake(rogue); err == nil {
		t.Fatal("broker 1's Raft transport took a certificate of another CA, want refused")
	}

	brokers.Broker(dir, "broker") // new certificate and key at the same paths
	for id := 1; id <= 3; id++ {
		if err := c.Restart(id); err != nil {
			t.Fatalf("restart broker %d: %v", id, err)
		}
		if err := c.WaitReady(2 * time.Minute); err != nil {
			t.Fatalf("after restarting broker %d with the rotated certificate: %v (the process logs follow)", id, err)
		}
	}
	infoOK("after the rolling rotation")
}

// args are the flags naming f's files with prefix (--tls or --cluster).
func args(prefix string, f tlsfiles.Files) []string {
	return []string{prefix + "-cert-file", f.CertFile, prefix + "-key-file", f.KeyFile, prefix + "-ca-file", f.CAFile}
}

// tlsLoadsCounted says a /metrics page counts a successful load of the
// cluster TLS files.
func tlsLoadsCounted(page string) error {
	if !strings.Contains(page, `sundial_tls_reloads_total{files="cluster",result="ok"}`) {
		return errors.New("metrics lack sundial_tls_reloads_total{files=\"cluster\",result=\"ok\"}")
	}
	return nil
}

// scrape reads broker b's /metrics over HTTPS, verifying its certificate.
func scrape(t *testing.T, c *framework.Cluster, b *framework.Broker) string {
	t.Helper()
	hc, err := c.BrokerHTTP()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(c.MetricsURL(b) + "/metrics") //nolint:noctx // a loopback scrape in a test
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(page)
}
