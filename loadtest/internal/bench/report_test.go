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
		{Name: "sundial", System: "Sundial", Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 200}},
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
		"| CPU at 1000 msgs/s (precision, RF 3): ≤ 0.45 cores for the whole cluster | 0.90 cores over the 8 s steady state (brokers 0.70, proxy 0.20) | **no** |", "| Durable publish, RF 3 ≥ 0.6× the no-op Raft ceiling (same run) | 0.50× (200 vs 400 msgs/s) | **no** |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown() lacks %q", want)
		}
	}
	if !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), "<polyline") {
		t.Errorf("SVG() = %.80q..., want an <svg> with a polyline", svg.String())
	}
}
