package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/loadtest/internal/target"
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
	got, err := cpuBetween(before, cpuSample{pids: []int{10, 11}, ticks: 26_000}, nil, 500_000)
	if err != nil {
		t.Fatalf("cpuBetween() error = %v", err)
	}
	if got.Processes != 2 || got.Seconds != 250 || math.Abs(got.PerMillion-500) > 1e-9 || got.Parts != nil {
		t.Errorf("cpuBetween() = %+v, want 2 processes, 250 s, 500 s per 1M, no parts", got)
	}
	if got, _ := cpuBetween(before, cpuSample{pids: []int{10, 11}, ticks: 1_000}, nil, 0); got.PerMillion != 0 {
		t.Errorf("cpuBetween(no messages).PerMillion = %v, want 0", got.PerMillion)
	}
	if _, err := cpuBetween(before, cpuSample{pids: []int{10, 12}, ticks: 2_000}, nil, 1); err == nil {
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

// fakeProc is a /proc reader over a map from pid to utime and stime.
type fakeProc map[int][2]uint64

func (f fakeProc) read(pid int) (string, error) {
	t, ok := f[pid]
	if !ok {
		return "", fmt.Errorf("open /proc/%d/stat: no such file or directory", pid)
	}
	return fmt.Sprintf("%d (sundial-broker) S 1 %d %d 0 -1 4194560 9120 0 0 0 %d %d 0 0 20 0 12 0 1234 0 0", pid, pid, pid, t[0], t[1]), nil
}

// TestCPUSplitsBrokersAndProxy drives the accounting of a Sundial run
// through a fake /proc: three brokers and a proxy, sampled before and
// after. The total is every process; the parts are the brokers summed
// and the proxy, and they add up to the total.
func TestCPUSplitsBrokersAndProxy(t *testing.T) {
	groups := []target.ProcessGroup{{Role: target.RoleBrokers, Pids: []int{30, 10, 20}}, {Role: target.RoleProxy, Pids: []int{40}}}
	proc := fakeProc{10: {100, 10}, 20: {200, 20}, 30: {300, 30}, 40: {50, 5}}
	before, err := sampleCPUWith(proc.read, groupPids(groups))
	if err != nil {
		t.Fatalf("sampleCPUWith(before) error = %v", err)
	}
	// Brokers spend 1000+500+1500 ticks (30 s), the proxy 1000 (10 s).
	proc[10], proc[20], proc[30], proc[40] = [2]uint64{900, 210}, [2]uint64{600, 120}, [2]uint64{1800, 30}, [2]uint64{850, 205}
	after, err := sampleCPUWith(proc.read, groupPids(groups))
	if err != nil {
		t.Fatalf("sampleCPUWith(after) error = %v", err)
	}
	got, err := cpuBetween(before, after, groups, 2_000_000)
	if err != nil {
		t.Fatalf("cpuBetween() error = %v", err)
	}
	want := CPU{Processes: 4, Seconds: 40, Messages: 2_000_000, PerMillion: 20, Parts: []CPUPart{
		{Role: "brokers", Processes: 3, Seconds: 30, PerMillion: 15},
		{Role: "proxy", Processes: 1, Seconds: 10, PerMillion: 5},
	}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cpuBetween() = %+v, want %+v", got, want)
	}

	// A pid the groups name but the samples lack is an error, not a zero.
	if _, err := cpuBetween(before, after, append(groups, target.ProcessGroup{Role: "extra", Pids: []int{50}}), 1); err == nil {
		t.Error("cpuBetween(group with an unsampled pid) error = nil, want one")
	}
	// A process that vanished fails the sample.
	delete(proc, 40)
	if _, err := sampleCPUWith(proc.read, groupPids(groups)); err == nil {
		t.Error("sampleCPUWith(missing proxy) error = nil, want one")
	}
}

type pidsOnly []int

func (p pidsOnly) Pids() []int { return p }

type grouped struct{ pidsOnly }

func (grouped) CPUGroups() []target.ProcessGroup {
	return []target.ProcessGroup{{Role: target.RoleBrokers, Pids: []int{1, 2}}, {Role: target.RoleProxy, Pids: []int{3}}}
}

func TestCPUGroups(t *testing.T) {
	if got := cpuGroups(pidsOnly{7}); len(got) != 1 || fmt.Sprint(got[0].Pids) != "[7]" {
		t.Errorf("cpuGroups(peer) = %+v, want one group of pid 7", got)
	}
	if got := groupPids(cpuGroups(grouped{pidsOnly{1, 2}})); fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("groupPids(cpuGroups(sundial)) = %v, want the brokers and the proxy [1 2 3]", got)
	}
}

// TestReportRendersCPUSplit checks the "brokers / proxy / client" cell
// of a Sundial row and a peer row, and that the JSON report carries the
// parts and the client's CPU.
func TestReportRendersCPUSplit(t *testing.T) {
	sundial := Run{Name: "sundial", System: "Sundial", Config: "3 brokers, RF 3", Scenario: Burst, Burst: &scenario.BurstResult{Published: 1_000_000},
		CPU: &CPU{Processes: 4, Seconds: 40, Messages: 1_000_000, PerMillion: 40, Parts: []CPUPart{
			{Role: "brokers", Processes: 3, Seconds: 32.5, PerMillion: 32.5}, {Role: "proxy", Processes: 1, Seconds: 7.5, PerMillion: 7.5}}},
		ClientCPU: &CPU{Processes: 1, Seconds: 12, Messages: 1_000_000, PerMillion: 12}}
	peer := Run{Name: "redis-always", System: "Redis", Scenario: Burst, Burst: &scenario.BurstResult{Published: 500_000},
		CPU:       &CPU{Processes: 1, Seconds: 5, Messages: 500_000, PerMillion: 10},
		ClientCPU: &CPU{Processes: 1, Seconds: 4, Messages: 500_000, PerMillion: 8}}
	unmeasured := Run{Name: "nats-always", System: "NATS JetStream", Scenario: Burst, Burst: &scenario.BurstResult{}}
	rep := Report{Runs: []Run{sundial, peer, unmeasured}}
	var md strings.Builder
	rep.Markdown(&md, "")
	for _, want := range []string{"| Brokers / proxy / client |", "| 40.0 s | 32.5 / 7.5 / 12.0 s |", "| 10.0 s | – / – / 8.0 s |", "| – | – |",
		"*Brokers / proxy / client*", "**CPU accounting**"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown() lacks %q:\n%s", want, md.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"parts":[{"role":"brokers","processes":3,"seconds":32.5,"seconds_per_million":32.5},{"role":"proxy"`,
		`"client_cpu":{"processes":1,"seconds":12,"messages":1000000,"seconds_per_million":12}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON report lacks %s:\n%s", want, b)
		}
	}
}

// TestTargetsRenderCPUAtPrecisionRate checks issue 10's target 5 row: the
// RF 3 precision run's CPU per message times the scenario's rate, in
// cores, split into brokers and proxy, with the client beside it.
func TestTargetsRenderCPUAtPrecisionRate(t *testing.T) {
	for _, tc := range []struct {
		name              string
		perMillion, proxy float64
		want              string
	}{
		// 400 s per 1M msgs at 1,000 msgs/s is 0.40 cores.
		{"met", 400, 100, "| CPU at 1000 msgs/s (precision, RF 3): ≤ 0.45 cores for the whole cluster | 0.40 cores (brokers 0.30, proxy 0.10; client 0.15 more) | yes |"},
		{"missed", 1770, 470, "| 1.77 cores (brokers 1.30, proxy 0.47; client 0.15 more) | **no** |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Report{Runs: []Run{{Name: "sundial", System: "Sundial", Scenario: Precision, Precision: &scenario.PrecisionResult{Published: 10_000},
				CPU: &CPU{Messages: 10_000, PerMillion: tc.perMillion, Parts: []CPUPart{
					{Role: target.RoleBrokers, PerMillion: tc.perMillion - tc.proxy}, {Role: target.RoleProxy, PerMillion: tc.proxy}}},
				ClientCPU: &CPU{Messages: 10_000, PerMillion: 150}}}}
			rep.Config.Precision.Rate = 1000
			var md strings.Builder
			rep.Markdown(&md, "")
			if !strings.Contains(md.String(), tc.want) {
				t.Errorf("Markdown() lacks %q:\n%s", tc.want, md.String())
			}
		})
	}
}

// The steady meter answers the CPU between its two samples in cores, and
// no figure when it did not see both ends of the window.
func TestSteadyMeter(t *testing.T) {
	groups := []target.ProcessGroup{{Role: "server", Pids: []int{os.Getpid()}}}
	m := &steadyMeter{groups: groups}
	m.steady(true)
	if _, err := m.result(); err == nil {
		t.Fatal("result() before the window ended: no error, want one saying it was not seen")
	}
	for spin := time.Now(); time.Since(spin) < 50*time.Millisecond; {
	}
	m.steady(false)
	got, err := m.result()
	if err != nil {
		t.Fatalf("result() = %v", err)
	}
	if got.Window <= 0 || got.Cores < 0 || got.Cores > float64(runtime.NumCPU()) {
		t.Fatalf("result() = %+v, want a positive window and between 0 and %d cores", got, runtime.NumCPU())
	}
}
