package broker

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// A broker without TLS refuses to start on an address other than loopback,
// naming the setting and the way out; started insecure, it serves there and
// says so on /readyz.
func TestBrokerWithoutTLSListensOnlyOnLoopbackUnlessInsecure(t *testing.T) {
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr, cfg.AdminAddr, cfg.DataDir = "127.0.0.1:0", free(), "0.0.0.0:0", "", t.TempDir()
	cfg.InitialMembers = map[uint64]Member{1: {RaftAddr: cfg.RaftAddr, GRPCAddr: cfg.GRPCAddr}}
	cfg.Shards, cfg.RTT, cfg.CacheBytes, cfg.MemTableBytes = 1, 10*time.Millisecond, 1<<20, 1<<20
	if b, err := New(cfg, zaptest.NewLogger(t), prometheus.NewRegistry()); err == nil {
		b.Stop()
		t.Fatal("New(metrics_addr 0.0.0.0:0, no TLS, not insecure) = nil error, want a refusal")
	} else if msg := err.Error(); !strings.Contains(msg, "metrics_addr: 0.0.0.0:0 is not a loopback address") || !strings.Contains(msg, "--insecure") {
		t.Fatalf("New(metrics_addr 0.0.0.0:0) error = %q, want it to name metrics_addr and --insecure", msg)
	}

	cfg.Insecure = true
	b, err := New(cfg, zaptest.NewLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(b.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), tlsfiles.InsecureWarning) {
		t.Fatalf("/readyz of an insecure broker = %d %q, want the warning %q", resp.StatusCode, body, tlsfiles.InsecureWarning)
	}
}
