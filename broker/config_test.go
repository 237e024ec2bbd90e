package broker

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"zero node id", func(c *Config) { c.NodeID = 0 }, "node_id"},
		{"node outside members", func(c *Config) { c.NodeID = 9 }, "initial_members"},
		{"bad grpc address", func(c *Config) { c.GRPCAddr = "localhost" }, "grpc_addr"},
		{"raft address differs from member", func(c *Config) { c.RaftAddr = "127.0.0.1:9999" }, "raft_addr"},
		{"bad raft listen address", func(c *Config) { c.RaftListenAddr = "nowhere" }, "raft_listen_addr"},
		{"grpc on every interface without TLS", func(c *Config) { c.GRPCAddr = "0.0.0.0:7501" }, "grpc_addr"},
		{"raft listen on every interface without TLS", func(c *Config) { c.RaftListenAddr = ":7601" }, "raft_listen_addr"},
		{"metrics on a host name without TLS", func(c *Config) { c.MetricsAddr = "broker-1:7701" }, "metrics_addr"},
		{"bad admin address", func(c *Config) { c.AdminAddr = "7801" }, "admin_addr"},
		{"admin on every interface without TLS", func(c *Config) { c.AdminAddr = "0.0.0.0:7801" }, "admin_addr"},
		{"join token file on an initial member", func(c *Config) { c.JoinTokenFile = "token" }, "join_token_file"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "data_dir"},
		{"no shards", func(c *Config) { c.Shards = 0 }, "shards"},
		{"upper-case label key", func(c *Config) { c.Labels = map[string]string{"Zone": "a"} }, "labels[Zone]"},
		{"empty label value", func(c *Config) { c.Labels = map[string]string{"zone": ""} }, "labels[zone]"},
		{"replication above members", func(c *Config) { c.ReplicationFactor = 3 }, "replication_factor"},
		{"zero dead node timeout", func(c *Config) { c.DeadNodeTimeout = 0 }, "dead_node_timeout"},
		{"negative dead node timeout", func(c *Config) { c.DeadNodeTimeout = -time.Minute }, "dead_node_timeout"},
		{"zero suspect node timeout", func(c *Config) { c.SuspectNodeTimeout = 0 }, "suspect_node_timeout"},
		{"negative operations timeout", func(c *Config) { c.Operations.CatchUpTimeout = -time.Second }, "operations"},
		{"election not above heartbeats", func(c *Config) { c.ElectionRTT = 4 }, "rtt"},
		{"short visibility timeout", func(c *Config) { c.VisibilityTimeout = 0 }, "limits"},
		{"negative retention", func(c *Config) { c.Retention = -time.Second }, "retention"},
		{"unknown log level", func(c *Config) { c.LogLevel = "loud" }, "log_level"},
		{"election within two heartbeats", func(c *Config) { c.ElectionRTT = 2 * c.HeartbeatRTT }, "rtt"},
		{"no raft workers", func(c *Config) { c.RaftWorkers = 0 }, "raft_workers"},
		{"too many raft log shards", func(c *Config) { c.RaftLogShards = 65 }, "raft_log_shards"},
		{"tiny cache", func(c *Config) { c.CacheBytes = 4096 }, "cache_bytes"},
		{"tiny memtable", func(c *Config) { c.MemTableBytes = 0 }, "memtable_bytes"},
		{"go memory limit below 32 MiB", func(c *Config) { c.GoMemoryLimit = 1 << 20 }, "go_memory_limit"},
		{"negative malloc arenas", func(c *Config) { c.MallocArenas = -1 }, "malloc_arenas"},
		{"too many malloc arenas", func(c *Config) { c.MallocArenas = 65 }, "malloc_arenas"},
		{"join with initial members", func(c *Config) { c.Join = []string{"127.0.0.1:7501"} }, "join"},
		{"join address without port", func(c *Config) { c.InitialMembers, c.Join = nil, []string{"127.0.0.1"} }, "join"},
		{"join address of another scheme", func(c *Config) { c.InitialMembers, c.Join = nil, []string{"http://127.0.0.1:7501"} }, "join"},
		{"join without a timeout", func(c *Config) { c.InitialMembers, c.Join, c.JoinTimeout = nil, []string{"127.0.0.1:7501"}, 0 }, "join_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.field+":") {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

// An insecure broker may listen on every interface.
func TestValidateAcceptsNonLoopbackWhenInsecure(t *testing.T) {
	c := DefaultConfig()
	c.GRPCAddr, c.RaftListenAddr, c.MetricsAddr, c.Insecure = "0.0.0.0:7501", ":7601", "broker-1:7701", true
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() of an insecure broker on 0.0.0.0 = %v, want nil", err)
	}
}

// A broker with TLS may serve gRPC and Raft on every interface; its
// plaintext metrics address stays on loopback unless insecure, and a
// certificate needs its key and the cluster CA.
func TestValidateTLS(t *testing.T) {
	tlsOn := func(c *Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "b.pem", "b-key.pem", "ca.pem"
		c.GRPCAddr, c.RaftListenAddr = "0.0.0.0:7501", ":7601"
	}
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // "" means valid
	}{
		{"tls on every interface", tlsOn, ""},
		{"tls, metrics on every interface", func(c *Config) { tlsOn(c); c.MetricsAddr = "0.0.0.0:7701" }, ""},
		{"tls, admin on every interface", func(c *Config) { tlsOn(c); c.AdminAddr = "0.0.0.0:7801" }, "admin_addr"},
		{"certificate without key", func(c *Config) { tlsOn(c); c.TLSKeyFile = "" }, "tls_cert_file and tls_key_file"},
		{"certificate without CA", func(c *Config) { tlsOn(c); c.TLSCAFile = "" }, "tls_ca_file"},
		{"CA without certificate", func(c *Config) { c.TLSCAFile = "ca.pem" }, "tls_cert_file"},
		{"Raft CA without certificate", func(c *Config) { c.TLSRaftCAFile = "brokers.pem" }, "tls_raft_ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), tt.field)):
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

// A joining broker needs no initial members and may leave its node id to
// the cluster.
func TestValidateAcceptsAJoin(t *testing.T) {
	c := DefaultConfig()
	c.NodeID, c.InitialMembers = 0, nil
	c.Join = []string{"127.0.0.1:7501", "dns+srv://_sundial-grpc._tcp.sundial.default.svc"}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(join, node id 0) = %v, want nil", err)
	}
}

// With neither initial members nor join the broker waits to be added.
func TestValidateAcceptsTheWaitingState(t *testing.T) {
	c := DefaultConfig()
	c.NodeID, c.InitialMembers = 0, nil
	if err := c.Validate(); err != nil || !c.waiting() {
		t.Fatalf("Validate(no members, no join) = %v, waiting() = %v; want nil, true", err, c.waiting())
	}
}

func TestParseMembers(t *testing.T) {
	got, err := ParseMembers("1=127.0.0.1:7601@127.0.0.1:7501, 2=h2:7602@h2:7502")
	if err != nil || len(got) != 2 || got[2].RaftAddr != "h2:7602" || got[2].GRPCAddr != "h2:7502" {
		t.Fatalf("ParseMembers() = %v, %v", got, err)
	}
	for _, bad := range []string{"x=a:1@b:2", "1=a:1", "0=a:1@b:2", "1"} {
		if _, err := ParseMembers(bad); err == nil {
			t.Errorf("ParseMembers(%q) error = nil, want one", bad)
		}
	}
}

func TestHostConfigCarriesEverySetting(t *testing.T) {
	c := DefaultConfig()
	c.DedupWindow = 3 * time.Minute
	got := hostConfig(c, "10.0.0.1:7501")
	if got.Dispatch.DedupWindow != 3*time.Minute {
		t.Errorf("hostConfig(dedup_window 3m).Dispatch.DedupWindow = %v, want 3m: request ids would be forgotten on the dispatcher's own default", got.Dispatch.DedupWindow)
	}
	if got.GRPCAddr != "10.0.0.1:7501" || got.CacheBytes != c.CacheBytes || got.InitialMembers[1].RaftAddr != c.InitialMembers[1].RaftAddr {
		t.Errorf("hostConfig() = %+v, want the broker's addresses and sizes", got)
	}
	c.ReplicationFactor = 1
	op := operatorConfig(c).Shards
	if !slices.Equal(op.InitialMembers, slices.Sorted(maps.Keys(c.InitialMembers))) || op.Shards != c.Shards || op.ReplicationFactor != 1 {
		t.Errorf("operatorConfig(shards %d, replication_factor 1).Shards = %+v, want the initial members, shards and replication factor the first shards are made with",
			c.Shards, op)
	}
}
