package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// A proxy without TLS refuses to start on an address other than loopback,
// naming the setting and the way out; started insecure, it serves there and
// says so on /readyz.
func TestProxyWithoutTLSListensOnlyOnLoopbackUnlessInsecure(t *testing.T) {
	_, broker := oneShardBroker(t, true)
	for _, setting := range []string{"grpc_addr", "http_addr"} {
		cfg := DefaultConfig()
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
