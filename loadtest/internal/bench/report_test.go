package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/loadtest/internal/target"
)

func TestAdvantage(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		sundial, peer        float64
		higherBetter, wantOK bool
		want                 float64
	}{
		{"throughput win", 200, 100, true, true, 2},
		{"throughput loss", 50, 100, true, true, 0.5},
		{"latency win", 2, 10, false, true, 5},
		{"latency loss", 10, 5, false, true, 0.5},
		{"missing peer", 10, 0, true, false, 0},
		{"missing sundial", 0, 10, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Advantage(tc.sundial, tc.peer, tc.higherBetter)
			if ok != tc.wantOK || got != tc.want {
				t.Fatalf("Advantage(%v, %v, %v) = %v, %v, want %v, %v", tc.sundial, tc.peer, tc.higherBetter, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestLogScale(t *testing.T) {
	for _, tc := range []struct {
		name      string
		v, lo, hi float64
		want      float64
	}{
		{"low end", 0.1, 0.1, 1000, 0},
		{"high end", 1000, 0.1, 1000, 1},
		{"middle decade", 10, 0.1, 1000, 0.5},
		{"clamped below", 0.001, 0.1, 1000, 0},
		{"clamped above", 1e9, 0.1, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LogScale(tc.v, tc.lo, tc.hi); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Fatalf("LogScale(%v, %v, %v) = %v, want %v", tc.v, tc.lo, tc.hi, got, tc.want)
			}
		})
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {1234567, "1,234,567"}} {
		if got := count(tc.in); got != tc.want {
			t.Errorf("count(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestReportRenders(t *testing.T) {
	cdf := []scenario.Quantile{{Q: 0, Value: time.Millisecond}, {Q: 1, Value: 20 * time.Millisecond}}
	rep := Report{Runs: []Run{
		{Name: "sundial", System: "Sundial", Config: "3 brokers, RF 3, 8 shards, 1 proxy", Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 200},
			Profile: &WindowProfile{Window: "publish", Seconds: 10, Messages: 2000,
				Roles: []RoleProfile{
					{Role: target.RoleBrokers, Processes: 3, CPU: &Breakdown{Seconds: 8, Categories: []CategorySeconds{{CatApply, 2}, {CatRaftLog, 4}, {CatGC, 0.4}, {CatOther, 1.6}}}},
					{Role: target.RoleProxy, Processes: 1},
				},
				Fsync: &Fsync{Brokers: 3, Count: 3000, PerSecond: 300, PerMillion: 1.5e6, MeanSeconds: 0.0012}}},
		{Name: "sundial-rf1", System: "Sundial", Config: "1 broker, RF 1 (one fsynced copy), 8 shards, 1 proxy", Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 300},
			Profile: &WindowProfile{Window: "publish", Error: "the publish window was not seen"}},
		{Name: "sundial", System: "Sundial", Config: "3 brokers, RF 3, 8 shards, 1 proxy", Scenario: Burst, Burst: &scenario.BurstResult{DrainRate: 100},
			Profile: &WindowProfile{Window: "drain", Seconds: 2, Roles: []RoleProfile{{Role: target.RoleBrokers, Processes: 3, CPU: &Breakdown{Seconds: 1}}},
				FsyncError: "the brokers export no sundial_broker_raft_log_fsyncs_total (a broker older than the metric)"}},
		{Name: "redis-always", System: "Redis", Durable: true, Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 100}},
		{Name: "nats-always", System: "NATS", Scenario: Throughput, Skipped: "nats-server is not on PATH"},
		{Name: "sundial", System: "Sundial", Scenario: Precision, Precision: &scenario.PrecisionResult{LatenessCDF: cdf},
			SteadyCPU: &SteadyCPU{Window: 8, Cores: 0.9, Parts: []CPUPart{{Role: target.RoleBrokers, Seconds: 0.7}, {Role: target.RoleProxy, Seconds: 0.2}}}},
	}}
	rep.Config.Precision.Rate, rep.Config.Precision.Duration, rep.Config.Precision.Delay = 1000, 10*time.Second, 2*time.Second
	rep.RaftCeiling = &RaftCeiling{Proposers: 8, MsgsPerS: 400}
	var md, svg strings.Builder
	rep.Markdown(&md, "chart.svg")
	if err := rep.SVG(&svg); err != nil {
		t.Fatalf("SVG() error = %v", err)
	}
	for _, want := range []string{"| Redis |", "2.00×", "skipped: nats-server is not on PATH", "![Lateness", "Durable publish ≥ 1.0×",
		"carried **400 msgs/s**", "Sundial  0.90 (brokers 0.70, proxy 0.20)",
		"### Where Sundial's CPU went (profiles of this run)\n\nCPU profiles of every broker and of the proxy over the publish window",
		"| System | Process | CPU s profiled | State machine apply | Pebble writes | Pebble flush + compaction | Pebble reads | Raft | Raft log write + fsync | Raft transport | Dispatcher | Sundial (other) | gRPC + HTTP/2 | protobuf | GC | Go scheduler | syscalls (other) | other |",
		"| Sundial 3 brokers, RF 3 | brokers (3) | 8.0 | 25 | 0 | 0 | 0 | 0 | 50 | 0 | 0 | 0 | 0 | 0 | 5.0 | 0 | 0 | 20 |",
		"| Sundial 3 brokers, RF 3 | proxy | – (fetch failed) | – |",
		"| Sundial 1 broker, RF 1 (one fsynced copy) | – | – (the publish window was not seen) | – |",
		"**Raft log fsyncs** over the same window (every broker's `sundial_broker_raft_log_fsyncs_total` summed, after minus before; per 1M of the messages published; the mean from `sundial_broker_raft_log_fsync_duration_seconds`): Sundial 3 brokers, RF 3: 3,000 fsyncs in 10.0 s, 300/s, 1,500,000 per 1M msgs, mean 1.20 ms; Sundial 1 broker, RF 1 (one fsynced copy): –.",
		"over the drain window (the first delivery to the last)",
		"Sundial 3 brokers, RF 3: – (the brokers export no sundial_broker_raft_log_fsyncs_total (a broker older than the metric)).",
		"| CPU at 1000 msgs/s (precision, RF 3): ≤ 0.45 cores for the whole cluster | 0.90 cores over the 8 s steady state (brokers 0.70, proxy 0.20) | **no** |", "| Durable publish, RF 3 ≥ 0.6× the no-op Raft ceiling (same run) | 0.50× (200 vs 400 msgs/s) | **no** |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown() lacks %q", want)
		}
	}
	if got, want := profileSummary(rep.Runs[0].Profile), "brokers 8.0 s (Raft log write + fsync 50%, State machine apply 25%, other 20%); proxy –; Raft log fsyncs 3,000 fsyncs in 10.0 s, 300/s, 1,500,000 per 1M msgs, mean 1.20 ms"; got != want {
		t.Errorf("profileSummary() = %q, want %q", got, want)
	}
	if !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), "<polyline") {
		t.Errorf("SVG() = %.80q..., want an <svg> with a polyline", svg.String())
	}
}
