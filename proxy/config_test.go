package proxy

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"default", func(*Config) {}, ""},
		{"port zero", func(c *Config) { c.GRPCAddr, c.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0" }, ""},
		{"http disabled", func(c *Config) { c.HTTPAddr = "" }, ""},
		{"no grpc addr", func(c *Config) { c.GRPCAddr = "" }, "grpc_addr"},
		{"grpc addr without port", func(c *Config) { c.GRPCAddr = "localhost" }, "grpc_addr"},
		{"bad http addr", func(c *Config) { c.HTTPAddr = "nope" }, "http_addr"},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "brokers"},
		{"bad broker", func(c *Config) { c.Brokers = []string{"127.0.0.1:7501", "x"} }, "brokers[1]"},
		{"zero timeout", func(c *Config) { c.ForwardTimeout = 0 }, "forward_timeout"},
		{"negative limit", func(c *Config) { c.Limits.MaxBatch = -1 }, "limits"},
		{"no progress frames", func(c *Config) { c.WatchSilenceTimeout = 0 }, ""},
		{"grpc on every interface without TLS", func(c *Config) { c.GRPCAddr = "0.0.0.0:7400" }, "grpc_addr: 0.0.0.0:7400 is not a loopback address"},
		{"http on a host name without TLS", func(c *Config) { c.HTTPAddr = "proxy-1:7480" }, "http_addr: proxy-1:7480 is not a loopback address"},
		{"every interface, insecure", func(c *Config) { c.GRPCAddr, c.HTTPAddr, c.Insecure = ":7400", "0.0.0.0:7480", true }, ""},
		{"localhost without TLS", func(c *Config) { c.GRPCAddr = "localhost:7400" }, ""},
		{"tls on every interface", func(c *Config) {
			c.TLSCertFile, c.TLSKeyFile, c.GRPCAddr, c.HTTPAddr = "p.pem", "p-key.pem", "0.0.0.0:7400", ":7480"
		}, ""},
		{"tls certificate without key", func(c *Config) { c.TLSCertFile = "p.pem" }, "tls_cert_file and tls_key_file"},
		{"client CA without certificate", func(c *Config) { c.TLSClientCAFile = "ca.pem" }, "tls_client_ca_file"},
		{"cluster certificate without CA", func(c *Config) { c.ClusterCertFile, c.ClusterKeyFile = "c.pem", "c-key.pem" }, "cluster_ca_file"},
		{"cluster key without certificate", func(c *Config) { c.ClusterKeyFile = "c-key.pem" }, "cluster_cert_file and cluster_key_file"},
		{"negative watch silence", func(c *Config) { c.WatchSilenceTimeout = -time.Second }, "watch_silence_timeout"},
		{"negative max_receipts", func(c *Config) { c.Limits.MaxReceipts = -1 }, "limits"},
		{"admin disabled", func(c *Config) { c.AdminAddr = "" }, ""},
		{"bad admin addr", func(c *Config) { c.AdminAddr = "7481" }, "admin_addr"},
		{"bad metrics addr", func(c *Config) { c.MetricsAddr = "nope" }, "metrics_addr"},
		{"pprof on every interface, even with tls", func(c *Config) {
			c.TLSCertFile, c.TLSKeyFile, c.AdminAddr = "p.pem", "p-key.pem", "0.0.0.0:7481"
		}, "admin_addr"},
		{"metrics on every interface without tls", func(c *Config) { c.MetricsAddr = "0.0.0.0:7482" }, "metrics_addr"},
		{"metrics on every interface, insecure", func(c *Config) { c.MetricsAddr, c.Insecure = "0.0.0.0:7482", true }, ""},
		{"origin without scheme", func(c *Config) { c.AllowedOrigins = []string{"console.example"} }, "allowed_origins[0]"},
		{"origin", func(c *Config) { c.AllowedOrigins = []string{"https://console.example:8443"} }, ""},
		{"negative read timeout", func(c *Config) { c.ListenLimits.HTTPReadTimeout = -time.Second }, "listen_limits"},
		{"negative max connections", func(c *Config) { c.ListenLimits.MaxConnections = -1 }, "listen_limits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.wantErr)
			}
		})
	}
}
