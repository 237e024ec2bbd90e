// Package bench runs every scenario against every system configuration,
// each on a freshly started instance, and renders the results as
// docs/benchmarks.md with an SVG chart of lateness distributions.
//
// In Sundial's throughput, burst and precision runs it also profiles every
// broker and the proxy over the scenario's measured window and reads the
// brokers' Raft log fsync counters at its ends (probe.go), and files each
// profile sample under a cost category (classify.go).
//
// RunAll is sequential: one system instance runs at a time, so the systems
// never compete for the machine. It owns no goroutines after it returns
// (a window's profile fetches are joined before its instance stops).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/loadtest/internal/target"
)

// Scenario names, in run order.
const (
	Throughput = "throughput"
	Burst      = "burst"
	Precision  = "precision"
	Backlog    = "backlog"
	Failover   = "failover"
	// Backup is not one of Scenarios: it runs alone (loadtest backup) and
	// on Sundial only, the one system with backups.
	Backup = "backup"
)

// Scenarios lists every scenario bench runs, in run order.
var Scenarios = []string{Throughput, Burst, Precision, Backlog, Failover}

// Config says what to run.
type Config struct {
	Systems    []target.Spec
	Scenarios  []string
	Throughput scenario.ThroughputConfig
	Burst      scenario.BurstConfig
	Precision  scenario.PrecisionConfig
	Backlog    scenario.BacklogConfig
	Failover   scenario.FailoverConfig
	// Backup's Dest defaults to file://<the run's work dir>/backups.
	Backup scenario.BackupConfig
	// Dir is the work directory for every instance's data; default a temp
	// dir, removed afterwards.
	Dir           string
	SundialBinDir string
	// NoRequestIDs makes Sundial publishes carry no request id (no dedup
	// record, no retry safety): the request shape ghz measured.
	NoRequestIDs bool
	// SundialPartitions is the Sundial topic's partition count; 0: one per
	// shard.
	SundialPartitions int
	// RaftCeilingBin is a test binary of the broker's host package (`go
	// test -c`); when set, RunAll first measures BenchmarkRaftCeiling with
	// it for RaftCeilingTime (default 5s), the limit target 2 compares with.
	RaftCeilingBin  string
	RaftCeilingTime time.Duration
	// NoProfiles skips the CPU profiles and fsync scrapes of the measured
	// windows (Run.Profile stays nil).
	NoProfiles bool
	// ProfileDir, when set, keeps the CPU profile of every Sundial server
	// process over each profiled window, as
	// <scenario>-<system>-<process>.pprof; default: not kept.
	ProfileDir string
	// ScenarioTimeout bounds one scenario on one system; default 10m.
	ScenarioTimeout time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// Run is one scenario on one system.
type Run struct {
	Name     string `json:"name"`
	System   string `json:"system"`
	Config   string `json:"config"`
	Durable  bool   `json:"durable"`
	Scenario string `json:"scenario"`
	// Skipped says why the run did not happen (missing binary, scenario
	// not meaningful for the system).
	Skipped string        `json:"skipped,omitempty"`
	Error   string        `json:"error,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`

	Throughput *scenario.ThroughputResult `json:"throughput,omitempty"`
	Burst      *scenario.BurstResult      `json:"burst,omitempty"`
	Precision  *scenario.PrecisionResult  `json:"precision,omitempty"`
	Backlog    *scenario.BacklogResult    `json:"backlog,omitempty"`
	Failover   *scenario.FailoverResult   `json:"failover,omitempty"`
	Backup     *scenario.BackupResult     `json:"backup,omitempty"`
	// CPU is what the server processes spent during the scenario; nil
	// when it could not be measured (CPUError says why).
	CPU      *CPU   `json:"cpu,omitempty"`
	CPUError string `json:"cpu_error,omitempty"`
	// ClientCPU is what this loadtest process (the load generator and
	// every client library) spent during the scenario, on the same cores.
	ClientCPU *CPU `json:"client_cpu,omitempty"`
	// SteadyCPU is the server processes' CPU in cores over the precision
	// scenario's steady state alone (publishing and delivering at its
	// rate), without the wait before the first message is due and the
	// drain after the last send, which the CPU column includes.
	SteadyCPU *SteadyCPU `json:"steady_cpu,omitempty"`
	// Profile is the CPU profiles of every server process and the
	// brokers' fsyncs over the scenario's measured window (Sundial's
	// throughput, burst and precision runs); nil elsewhere.
	Profile *WindowProfile `json:"profile,omitempty"`
}

// SteadyCPU is CPU over a window, in cores (CPU seconds per second).
type SteadyCPU struct {
	Window float64 `json:"window_s"`
	Cores  float64 `json:"cores"`
	// Parts are the cores of each role (Sundial: brokers, proxy).
	Parts []CPUPart `json:"parts,omitempty"`
}

// steadyMeter samples groups at the two ends of a window (steady(true),
// steady(false)); result is the CPU between them in cores, or why there is
// none (the window was not seen whole, a sample failed).
type steadyMeter struct {
	groups      []target.ProcessGroup
	begin, end  time.Time
	first, last cpuSample
	err         error
}

func (m *steadyMeter) steady(begin bool) {
	s, err := sampleCPU(groupPids(m.groups))
	if err != nil {
		m.err = err
		return
	}
	if begin {
		m.begin, m.first = time.Now(), s
	} else {
		m.end, m.last = time.Now(), s
	}
}

func (m *steadyMeter) result() (*SteadyCPU, error) {
	if m.err != nil {
		return nil, m.err
	}
	if m.begin.IsZero() || m.end.IsZero() || !m.end.After(m.begin) {
		return nil, errors.New("bench: the steady window was not seen")
	}
	c, err := cpuBetween(m.first, m.last, m.groups, 1)
	if err != nil {
		return nil, err
	}
	w := m.end.Sub(m.begin).Seconds()
	out := &SteadyCPU{Window: w, Cores: c.Seconds / w}
	for _, p := range c.Parts {
		out.Parts = append(out.Parts, CPUPart{Role: p.Role, Processes: p.Processes, Seconds: p.Seconds / w})
	}
	return out, nil
}

// Machine describes where the run happened.
type Machine struct {
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	CPU         string `json:"cpu"`
	GoVersion   string `json:"go_version"`
	Kernel      string `json:"kernel"`
	Versions    string `json:"versions"`
}

// Report is a whole benchmark run.
type Report struct {
	Machine Machine       `json:"machine"`
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Runs    []Run         `json:"runs"`
	// RaftCeiling is nil when the run did not measure it.
	RaftCeiling *RaftCeiling `json:"raft_ceiling,omitempty"`
	Config      struct {
		Throughput scenario.ThroughputConfig `json:"throughput"`
		Burst      scenario.BurstConfig      `json:"burst"`
		Precision  scenario.PrecisionConfig  `json:"precision"`
		Backlog    scenario.BacklogConfig    `json:"backlog"`
		Failover   scenario.FailoverConfig   `json:"failover"`
		Backup     *scenario.BackupConfig    `json:"backup,omitempty"`
	} `json:"config"`
}

// RunAll runs cfg.Scenarios × cfg.Systems and returns every run, failed or
// skipped ones included. It stops early only when ctx ends.
func RunAll(ctx context.Context, cfg Config) (Report, error) {
	if cfg.ScenarioTimeout <= 0 {
		cfg.ScenarioTimeout = 10 * time.Minute
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	cfg.Progress = progress
	rep := Report{Machine: DescribeMachine(cfg.Systems), Started: time.Now()}
	rep.Config.Throughput, rep.Config.Burst, rep.Config.Precision = cfg.Throughput, cfg.Burst, cfg.Precision
	rep.Config.Backlog, rep.Config.Failover = cfg.Backlog, cfg.Failover
	if contains(cfg.Scenarios, Backup) {
		rep.Config.Backup = &cfg.Backup
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "loadtest-bench-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if cfg.RaftCeilingBin != "" {
		if cfg.RaftCeilingTime <= 0 {
			cfg.RaftCeilingTime = 5 * time.Second
		}
		fmt.Fprintf(progress, "bench: raft ceiling (%s) starting\n", cfg.RaftCeilingBin)
		c := measureRaftCeiling(ctx, cfg.RaftCeilingBin, cfg.RaftCeilingTime)
		rep.RaftCeiling = &c
		fmt.Fprintf(progress, "bench: raft ceiling done: %.0f msgs/s %s\n", c.MsgsPerS, errSuffix(c.Error))
	}
	for _, sc := range cfg.Scenarios {
		for _, spec := range cfg.Systems {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			run := Run{Name: spec.Name, System: spec.System, Config: spec.Config, Durable: spec.Durable, Scenario: sc}
			if _, err := spec.BinaryPath(); err != nil {
				run.Skipped = err.Error()
				fmt.Fprintf(progress, "bench: %-10s %-17s SKIPPED: %v\n", sc, spec.Name, err)
				rep.Runs = append(rep.Runs, run)
				continue
			}
			if why := backupSkip(sc, spec); why != "" {
				run.Skipped = why
				rep.Runs = append(rep.Runs, run)
				continue
			}
			if sc == Failover && spec.Brokers() < 3 {
				run.Skipped = "single server process: losing it is an outage until restart, not a failover"
				if spec.SundialBrokers > 0 {
					run.Skipped = "one broker: losing it is an outage until restart, not a failover"
				}
				rep.Runs = append(rep.Runs, run)
				continue
			}
			fmt.Fprintf(progress, "bench: %-10s %-17s starting\n", sc, spec.Name)
			start := time.Now()
			err := runOne(ctx, cfg, sc, spec, filepath.Join(dir, sc+"-"+spec.Name), &run)
			run.Elapsed = time.Since(start)
			if err != nil {
				run.Error = err.Error()
			}
			fmt.Fprintf(progress, "bench: %-10s %-17s done in %v: %s\n", sc, spec.Name, run.Elapsed.Round(time.Second), Summary(run))
			rep.Runs = append(rep.Runs, run)
		}
	}
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

func runOne(ctx context.Context, cfg Config, sc string, spec target.Spec, dir string, run *Run) (err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.ScenarioTimeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	inst, err := spec.Start(ctx, target.Options{Dir: dir, SundialBinDir: cfg.SundialBinDir, NoRequestIDs: cfg.NoRequestIDs, Partitions: cfg.SundialPartitions})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer func() { err = errors.Join(err, inst.Close()) }()
	groups := cpuGroups(inst)
	before, cpuErr := sampleCPU(groupPids(groups))
	self := []int{os.Getpid()}
	selfBefore, selfErr := sampleCPU(self)
	defer func() {
		if selfErr == nil {
			if selfAfter, err := sampleCPU(self); err == nil {
				if c, err := cpuBetween(selfBefore, selfAfter, nil, run.messages()); err == nil {
					run.ClientCPU = &c
				}
			}
		}
		if cpuErr == nil {
			var after cpuSample
			// The groups again: a restarted process has a new pid.
			after, cpuErr = sampleCPU(groupPids(cpuGroups(inst)))
			if cpuErr == nil {
				var c CPU
				if c, cpuErr = cpuBetween(before, after, groups, run.messages()); cpuErr == nil {
					run.CPU = &c
				}
			}
		}
		if cpuErr != nil {
			run.CPUError = cpuErr.Error()
		}
	}()
	// probe profiles a Sundial system's measured window; the peers have no
	// pprof endpoints.
	var probe *windowProbe
	hook := func(window string) func(bool) {
		eps := endpoints(inst)
		if len(eps) == 0 || cfg.NoProfiles {
			return nil
		}
		probe = newWindowProbe(ctx, window, eps)
		return probe.window
	}
	profiled := func(msgs func(seconds float64) uint64) {
		if probe == nil {
			return
		}
		run.Profile = probe.result(msgs, cfg.ProfileDir, sc+"-"+spec.Name)
		for _, w := range append(run.Profile.Warnings, run.Profile.Error) {
			if w != "" {
				fmt.Fprintf(cfg.Progress, "bench: %-10s %-17s WARNING: %s\n", sc, spec.Name, w)
			}
		}
		if run.Profile.Error == "" {
			fmt.Fprintf(cfg.Progress, "bench: %-10s %-17s profiled the %s window: %s\n", sc, spec.Name, run.Profile.Window, profileSummary(run.Profile))
		}
	}
	switch sc {
	case Throughput:
		tc := cfg.Throughput
		tc.OnPublish = hook("publish")
		r, err := scenario.Throughput(ctx, inst, tc)
		run.Throughput = &r
		profiled(func(float64) uint64 { return r.Published })
		return err
	case Burst:
		bc := cfg.Burst
		bc.OnDrain = hook("drain")
		r, err := scenario.Burst(ctx, inst, bc)
		run.Burst = &r
		profiled(func(float64) uint64 { return r.Delivered })
		return err
	case Precision:
		meter := &steadyMeter{groups: groups}
		pc := cfg.Precision
		window := hook("steady")
		pc.OnSteady = func(begin bool) {
			meter.steady(begin)
			if window != nil {
				window(begin)
			}
		}
		r, err := scenario.Precision(ctx, inst, pc)
		run.Precision = &r
		// The steady window publishes, and delivers, at the rate.
		profiled(func(s float64) uint64 { return uint64(float64(r.Config.Rate) * s) })
		if s, serr := meter.result(); serr == nil {
			run.SteadyCPU = s
		} else if run.CPUError == "" {
			run.CPUError = "steady window: " + serr.Error()
		}
		return err
	case Backlog:
		r, err := scenario.Backlog(ctx, inst, cfg.Backlog)
		run.Backlog = &r
		return err
	case Failover:
		r, err := scenario.Failover(ctx, inst, cfg.Failover)
		run.Failover = &r
		return err
	case Backup:
		bc := cfg.Backup
		if bc.Dest == "" {
			abs, err := filepath.Abs(filepath.Join(dir, "backups"))
			if err != nil {
				return err
			}
			bc.Dest = "file://" + abs
		}
		r, err := scenario.Backup(ctx, inst, bc)
		run.Backup = &r
		return err
	}
	return fmt.Errorf("bench: unknown scenario %q", sc)
}

// messages is how many messages the run moved, for the CPU column.
func (r *Run) messages() uint64 {
	switch {
	case r.Throughput != nil:
		return r.Throughput.Published
	case r.Burst != nil:
		return r.Burst.Published
	case r.Precision != nil:
		return r.Precision.Published
	case r.Backlog != nil:
		return r.Backlog.Published
	case r.Failover != nil:
		return r.Failover.Published
	case r.Backup != nil:
		return r.Backup.Published + r.Backup.Due + r.Backup.ChangesPublished
	}
	return 0
}

// Summary is a one-line account of a run for progress output.
func Summary(r Run) string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case r.Throughput != nil:
		return fmt.Sprintf("%.0f msgs/s, batch p99 %v, CPU %s/1M msgs (brokers / proxy / client %s) %s", r.Throughput.MsgsPerS, ms(r.Throughput.BatchLatency.P99), cpuCell(r.CPU), splitCell(r), errSuffix(r.Error))
	case r.Burst != nil:
		b := r.Burst
		return fmt.Sprintf("%d/%d delivered, drain %.0f msgs/s, lateness p50 %v p99 %v, CPU %s/1M msgs (brokers / proxy / client %s) %s", b.Delivered, b.Published, b.DrainRate, ms(b.Lateness.P50), ms(b.Lateness.P99), cpuCell(r.CPU), splitCell(r), errSuffix(r.Error))
	case r.Precision != nil:
		p := r.Precision
		return fmt.Sprintf("%d/%d received, early %d, lateness p50 %v p99 %v max %v, CPU %s/1M msgs (brokers / proxy / client %s) %s", p.Received, p.Published, p.Early, ms(p.Lateness.P50), ms(p.Lateness.P99), ms(p.Lateness.Max), cpuCell(r.CPU), splitCell(r), errSuffix(r.Error))
	case r.Backlog != nil:
		b := r.Backlog
		return fmt.Sprintf("%d pending, max RSS %s, %.0f B/msg, disk %s, first due %v after restart %s", b.Published, mib(b.MaxRSSBytes), b.RSSPerMsgBytes, mib(b.DiskBytes), ms(b.FirstDue), errSuffix(r.Error))
	case r.Failover != nil:
		f := r.Failover
		return fmt.Sprintf("killed %s, window %v, failed %d, lost %d %s", f.Killed, ms(f.Window), f.Failed, f.Lost, errSuffix(r.Error))
	case r.Backup != nil:
		return backupSummary(r.Backup) + " " + errSuffix(r.Error)
	}
	return errSuffix(r.Error)
}

// backupSkip says why the backup scenario does not run on spec ("" when
// it does, and for every other scenario).
func backupSkip(sc string, spec target.Spec) string {
	switch {
	case sc != Backup:
		return ""
	case spec.SundialBrokers == 0:
		return "no backup and restore to drive"
	case spec.TLS:
		return "TLS: the Backups calls go to a broker, which asks a cluster certificate loadtest does not hold for a client"
	}
	return ""
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "ERROR: " + e
}

// DescribeMachine reads cores, memory, CPU model, kernel and versions.
func DescribeMachine(specs []target.Spec) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb); err == nil {
					m.MemoryBytes = kb * 1024
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if _, v, ok := strings.Cut(line, ":"); ok {
					m.CPU = strings.TrimSpace(v)
					break
				}
			}
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	var vs []string
	for _, s := range specs {
		if s.Binary == "" {
			continue
		}
		p, err := s.BinaryPath()
		if err != nil {
			continue
		}
		flag := "--version"
		if s.Binary == "beanstalkd" {
			flag = "-v"
		}
		out, _ := exec.Command(p, flag).CombinedOutput()
		v := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		entry := s.Binary + ": " + v
		if !contains(vs, entry) {
			vs = append(vs, entry)
		}
	}
	m.Versions = strings.Join(vs, "; ")
	return m
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
