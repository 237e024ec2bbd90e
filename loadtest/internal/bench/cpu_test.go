package bench

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		wantErr    bool
	}{
		// Fields 14 (utime) = 1500 and 15 (stime) = 250.
		{"plain", "4242 (sundial-broker) S 1 4242 4242 0 -1 4194560 9120 0 0 0 1500 250 0 0 20 0 12 0 1234 0 0", 1750, false},
		// A command name with spaces and ')' must not shift the fields.
		{"name with ) and spaces", "77 (a) b (c) R 1 77 77 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 9 0 0", 10, false},
		{"no command name", "77 R 1 77", 0, true},
		{"truncated", "77 (x) R 1 77 77 0 -1 0 0 0 0 0 7", 0, true},
		{"not a number", "77 (x) R 1 77 77 0 -1 0 0 0 0 0 seven 3 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU(tc.stat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseStatCPU() = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSampleCPUReadsThisProcess(t *testing.T) {
	// Burn a little CPU so this process has at least one tick.
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	s, err := sampleCPU([]int{os.Getpid()})
	if err != nil {
		t.Fatalf("sampleCPU(self) error = %v", err)
	}
	if s.ticks == 0 {
		t.Errorf("sampleCPU(self) = 0 ticks after a busy loop (x=%d)", x)
	}
	if _, err := sampleCPU([]int{os.Getpid(), 1 << 30}); err == nil {
		t.Error("sampleCPU(missing pid) error = nil, want one")
	}
}

func TestCPUBetween(t *testing.T) {
	before := cpuSample{pids: []int{10, 11}, ticks: 1_000}
	// 250 s of CPU over 500,000 messages is 500 s per million.
	got, err := cpuBetween(before, cpuSample{pids: []int{10, 11}, ticks: 26_000}, 500_000)
	if err != nil {
		t.Fatalf("cpuBetween() error = %v", err)
	}
	if got.Processes != 2 || got.Seconds != 250 || math.Abs(got.PerMillion-500) > 1e-9 {
		t.Errorf("cpuBetween() = %+v, want 2 processes, 250 s, 500 s per 1M", got)
	}
	if got, _ := cpuBetween(before, cpuSample{pids: []int{10, 11}, ticks: 1_000}, 0); got.PerMillion != 0 {
		t.Errorf("cpuBetween(no messages).PerMillion = %v, want 0", got.PerMillion)
	}
	if _, err := cpuBetween(before, cpuSample{pids: []int{10, 12}, ticks: 2_000}, 1); err == nil {
		t.Error("cpuBetween(restarted process) error = nil, want one")
	}
}

func TestReportRendersCPUAndSingleCopyRow(t *testing.T) {
	rep := Report{Runs: []Run{
		{Name: "sundial", System: "Sundial", Config: "3 brokers, RF 3", Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 200},
			CPU: &CPU{Messages: 1_000_000, PerMillion: 42.5}},
		{Name: "sundial-rf1", System: "Sundial", Config: "1 broker, RF 1", Durable: true, Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 400},
			CPU: &CPU{Messages: 2_000_000, PerMillion: 12}},
		{Name: "redis-always", System: "Redis", Durable: true, Scenario: Throughput, Throughput: &scenario.ThroughputResult{MsgsPerS: 100}},
	}}
	var md strings.Builder
	rep.Markdown(&md, "")
	for _, want := range []string{"CPU / 1M msgs", "| 42.5 s |", "| 1 broker, RF 1 |", "| 12.0 s |", "| – |", "| – (Sundial) |",
		"| Durable publish, RF 1 ≥ 1.0× Redis always | 4.00× (400 vs 100 msgs/s) | yes |",
		// The RF 1 row is Sundial, not the best durable peer.
		"2.00× (200 vs redis-always 100 msgs/s)", "| Durable publish, RF 3 ≥ 0.5× Redis always | 2.00× (200 vs 100 msgs/s) | yes |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown() lacks %q:\n%s", want, md.String())
		}
	}
}
