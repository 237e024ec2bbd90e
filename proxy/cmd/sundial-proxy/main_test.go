package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/proxy"
)

func TestExampleConfigIsTheDefaults(t *testing.T) {
	data, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got proxy.Config
	var level string
	if err := decodeFile(data, &got, &level); err != nil {
		t.Fatalf("decodeFile(config.example.yaml) error = %v", err)
	}
	if want := proxy.DefaultConfig(); !reflect.DeepEqual(got, want) || level != "info" {
		t.Fatalf("config.example.yaml decodes to\n%+v, log level %q\nwant DefaultConfig()\n%+v, log level info", got, level, want)
	}
}

func TestDecodeFileSetsLimits(t *testing.T) {
	cfg, level := proxy.DefaultConfig(), "info"
	if err := decodeFile([]byte("limits:\n  max_message_bytes: 4096\n  max_batch: 50\n"), &cfg, &level); err != nil {
		t.Fatalf("decodeFile() error = %v", err)
	}
	want := proxy.DefaultConfig().Limits
	want.MaxMessageBytes, want.MaxBatch = 4096, 50
	if cfg.Limits != want {
		t.Fatalf("decodeFile(limits) Limits = %+v, want %+v", cfg.Limits, want)
	}
	if cfg.GRPCAddr != proxy.DefaultConfig().GRPCAddr {
		t.Fatalf("decodeFile(limits only) changed grpc_addr to %q", cfg.GRPCAddr)
	}
}

func TestDecodeFileRefusesUnknownKeys(t *testing.T) {
	tests := []struct{ doc, key string }{
		{"forward_timout: 5s\n", "forward_timout"},
		{"limits:\n  max_mesage_bytes: 10\n", "max_mesage_bytes"},
	}
	for _, tt := range tests {
		cfg, level := proxy.DefaultConfig(), "info"
		if err := decodeFile([]byte(tt.doc), &cfg, &level); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("decodeFile(%q) = %v, want an error naming %s", tt.doc, err, tt.key)
		}
	}
}

func TestDecodeAuthSection(t *testing.T) {
	cfg := proxy.DefaultConfig()
	level := "info"
	data := []byte("auth:\n  enabled: true\n  bootstrap_token_file: /tmp/t\n  cert_principals:\n    - {subject: \"^CN=(.*)$\", principal: \"$1\", role: demo}\n")
	if err := decodeFile(data, &cfg, &level); err != nil {
		t.Fatal(err)
	}
	want := proxy.AuthConfig{Enabled: true, BootstrapTokenFile: "/tmp/t", CertPrincipals: []proxy.CertPrincipal{{Subject: "^CN=(.*)$", Principal: "$1", Role: "demo"}}}
	if !reflect.DeepEqual(cfg.Auth, want) {
		t.Fatalf("auth section decodes to %+v, want %+v", cfg.Auth, want)
	}
}
