package main

import (
	"maps"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/broker"
)

func TestOverlayEnvSetsYAMLKeys(t *testing.T) {
	env := map[string]string{
		"SUNDIAL_CACHE_BYTES":        "25165824",
		"SUNDIAL_RTT":                "50ms",
		"SUNDIAL_AUTO_CREATE_TOPICS": "false",
		"SUNDIAL_LOG_LEVEL":          "warn",
		"SUNDIAL_DEAD_NODE_TIMEOUT":  "4s",
	}
	cfg := broker.DefaultConfig()
	if err := overlayEnv(&cfg, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatalf("overlayEnv() error = %v", err)
	}
	if cfg.CacheBytes != 24<<20 || cfg.RTT != 50*time.Millisecond || cfg.AutoCreateTopics || cfg.LogLevel != "warn" || cfg.DeadNodeTimeout != 4*time.Second {
		t.Fatalf("config after overlay = cache %d, rtt %v, auto-create %v, log %q, dead node timeout %v", cfg.CacheBytes, cfg.RTT, cfg.AutoCreateTopics, cfg.LogLevel, cfg.DeadNodeTimeout)
	}
}

func TestOverlayEnvNamesTheBadVariable(t *testing.T) {
	cfg := broker.DefaultConfig()
	err := overlayEnv(&cfg, func(k string) (string, bool) {
		if k == "SUNDIAL_MEMTABLE_BYTES" {
			return "lots", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), "SUNDIAL_MEMTABLE_BYTES") {
		t.Fatalf("overlayEnv(bad value) = %v, want an error naming SUNDIAL_MEMTABLE_BYTES", err)
	}
	if cfg.MemTableBytes != broker.DefaultConfig().MemTableBytes {
		t.Fatalf("bad value changed memtable_bytes to %d", cfg.MemTableBytes)
	}
}

func TestExampleConfigIsTheDefaults(t *testing.T) {
	data, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got broker.Config
	if err := decodeConfig(data, &got); err != nil {
		t.Fatalf("decodeConfig(config.example.yaml) error = %v", err)
	}
	if want := broker.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("config.example.yaml decodes to\n%+v\nwant DefaultConfig()\n%+v", got, want)
	}
}

func TestDecodeConfigRefusesUnknownKeys(t *testing.T) {
	cfg := broker.DefaultConfig()
	err := decodeConfig([]byte("node_id: 2\ndedup_windw: 1m\n"), &cfg)
	if err == nil || !strings.Contains(err.Error(), "dedup_windw") {
		t.Fatalf("decodeConfig(misspelt key) = %v, want an error naming dedup_windw", err)
	}
	if err := decodeConfig(nil, &cfg); err != nil {
		t.Fatalf("decodeConfig(empty file) = %v, want nil", err)
	}
}

func TestLabelsFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		want    map[string]string
		wantErr string
	}{
		{name: "flag", args: []string{"--labels", "zone=a,rack=r1"}, want: map[string]string{"zone": "a", "rack": "r1"}},
		{name: "env", env: "zone=b", want: map[string]string{"zone": "b"}},
		{name: "none", want: nil},
		{name: "no value", args: []string{"--labels", "zone"}, wantErr: `--labels: label "zone": want key=value`},
		{name: "upper-case key", args: []string{"--labels", "Zone=a"}, wantErr: "--labels: labels[Zone]: a label key is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SUNDIAL_LABELS", tc.env)
			if tc.env == "" {
				os.Unsetenv("SUNDIAL_LABELS")
			}
			var got broker.Config
			var err error
			app := newApp(func(c *cli.Context) error {
				got, err = load(c)
				return nil
			})
			if runErr := app.Run(append([]string{"sundial-broker", "--node-id", "1"}, tc.args...)); runErr != nil {
				t.Fatalf("Run(%v) = %v", tc.args, runErr)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("load(%v) error = %v, want %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got.Labels, tc.want) {
				t.Fatalf("load(%v, SUNDIAL_LABELS=%q) = labels %v, %v, want %v", tc.args, tc.env, got.Labels, err, tc.want)
			}
		})
	}
}
