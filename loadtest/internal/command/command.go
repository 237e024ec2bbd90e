// Package command is loadtest's command line: it maps flags onto the
// scenario and bench configs, runs scenarios against Sundial and the peer
// systems, and prints the results (a table on stdout, optionally JSON to a
// file; `bench` also writes docs/benchmarks.md and its SVG chart). Exit
// codes: 0 ok, 1 a run failed, 2 usage error. Progress goes to stderr.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/loadtest/internal/bench"
	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/loadtest/internal/target"
)

// startCPUProfile profiles this process into path until the returned stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errRunFailed reports that at least one run failed (details printed).
var errRunFailed = errors.New("at least one run failed")

func systemNames() string {
	names := make([]string, len(target.Specs))
	for i, s := range target.Specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func parseSystems(v string) ([]target.Spec, error) {
	if v == "all" {
		return target.Specs, nil
	}
	var out []target.Spec
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		s, err := target.Lookup(n)
		if err != nil {
			return nil, usagef("--system %q: want all or a list of: %s", n, systemNames())
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, usagef("--system: empty list")
	}
	return out, nil
}

func loadFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "system", Value: "sundial", Usage: "systems to run, comma-separated, or all: " + systemNames()},
		&cli.IntFlag{Name: "concurrency", Value: 8, Usage: "producers (one batch in flight each) and consumer workers"},
		&cli.IntFlag{Name: "batch", Value: 100, Usage: "messages per publish batch and consumer prefetch"},
		&cli.IntFlag{Name: "size", Value: 100, Usage: "payload bytes (at least 16)"},
		&cli.StringFlag{Name: "json", Usage: "also write the results as JSON to `FILE` (- for stdout)"},
		&cli.StringFlag{Name: "dir", Usage: "work directory for server data (default: a temp dir, removed afterwards)"},
		&cli.StringFlag{Name: "bin-dir", Usage: "directory with sundial-broker and sundial-proxy (default: <repo>/bin; built when missing)"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "bound on one scenario on one system"},
		&cli.StringFlag{Name: "cpu-profile", Usage: "write this loadtest process's (the client's) CPU profile to `FILE` (go tool pprof)"},
		&cli.BoolFlag{Name: "profiles", Value: true, Usage: "Sundial: CPU-profile every broker and the proxy and read the brokers' Raft log fsync counters over the measured window of throughput, burst and precision (about 1% more server CPU); false skips them"},
		&cli.StringFlag{Name: "profile-dir", Usage: "keep the CPU profiles of every Sundial broker and proxy over each profiled window (throughput: publish, burst: drain, precision: steady) in `DIR`, as <scenario>-<system>-<process>.pprof (default: not kept)"},
		&cli.IntFlag{Name: "sundial-partitions", Usage: "Sundial: partitions of the topic (default: one per shard, so every batch is split over every shard)"},
		&cli.BoolFlag{Name: "sundial-request-ids", Value: true, Usage: "Sundial: send a request id with every publish (the SDK's Publish does; each shard then keeps a dedup record per batch part); false sends none, the shape ghz measured"},
	}
}

func load(c *cli.Context) (scenario.Load, error) {
	l := scenario.Load{Concurrency: c.Int("concurrency"), Batch: c.Int("batch"), SizeBytes: c.Int("size")}
	switch {
	case l.Concurrency < 1 || l.Concurrency > 10000:
		return l, usagef("--concurrency %d: want 1..10000", l.Concurrency)
	case l.Batch < 1 || l.Batch > 100000:
		return l, usagef("--batch %d: want 1..100000", l.Batch)
	case l.SizeBytes < scenario.HeaderBytes || l.SizeBytes > 1<<20:
		return l, usagef("--size %d: want %d..1048576", l.SizeBytes, scenario.HeaderBytes)
	}
	return l, nil
}

func positive(c *cli.Context, names ...string) error {
	for _, n := range names {
		if c.Duration(n) <= 0 {
			return usagef("--%s %v: want a positive duration", n, c.Duration(n))
		}
	}
	return nil
}

// fillFlags are the flags of a scenario that fills a number of messages
// (burst, backlog): the load flags, --messages and --max-fill.
func fillFlags(messagesUsage string, maxFill time.Duration) []cli.Flag {
	return append(loadFlags(),
		&cli.Uint64Flag{Name: "messages", Value: 1_000_000, Usage: messagesUsage},
		&cli.DurationFlag{Name: "max-fill", Value: maxFill, Usage: "stop filling after this long"},
	)
}

// fill reads the flags fillFlags adds, or a usage error.
func fill(c *cli.Context) (messages uint64, maxFill time.Duration, err error) {
	if c.Uint64("messages") == 0 {
		return 0, 0, usagef("--messages: want at least 1")
	}
	return c.Uint64("messages"), c.Duration("max-fill"), positive(c, "max-fill")
}

// withTimeout sets the default of the --timeout flag among flags (a
// scenario that runs longer than the others).
func withTimeout(flags []cli.Flag, d time.Duration) []cli.Flag {
	for _, f := range flags {
		if df, ok := f.(*cli.DurationFlag); ok && df.Name == "timeout" {
			df.Value = d
		}
	}
	return flags
}

// rate checks the --rate of a steady-rate scenario (precision, failover).
func rate(c *cli.Context) error {
	if r := c.Int("rate"); r < 1 || r > 1000000 {
		return usagef("--rate %d: want 1..1000000", r)
	}
	return nil
}

// Run runs loadtest with args and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	onUsage := func(_ *cli.Context, err error, _ bool) error { return &usageError{err.Error()} }
	// runScenario runs one scenario on the selected systems.
	runScenario := func(c *cli.Context, name string, set func(*bench.Config) error) error {
		l, err := load(c)
		if err != nil {
			return err
		}
		specs, err := parseSystems(c.String("system"))
		if err != nil {
			return err
		}
		cfg := bench.Config{Systems: specs, Scenarios: []string{name}, Dir: c.String("dir"), SundialBinDir: c.String("bin-dir"), ProfileDir: c.String("profile-dir"), NoProfiles: !c.Bool("profiles"),
			ScenarioTimeout: c.Duration("timeout"), Progress: stderr, NoRequestIDs: !c.Bool("sundial-request-ids"), SundialPartitions: c.Int("sundial-partitions")}
		cfg.Throughput.Load, cfg.Burst.Load, cfg.Precision.Load, cfg.Backlog.Load, cfg.Failover.Load, cfg.Backup.Load = l, l, l, l, l, l
		if err := set(&cfg); err != nil {
			return err
		}
		if path := c.String("cpu-profile"); path != "" {
			stop, err := startCPUProfile(path)
			if err != nil {
				return err
			}
			defer stop()
		}
		rep, err := bench.RunAll(c.Context, cfg)
		printRuns(stdout, rep.Runs)
		for _, r := range rep.Runs {
			bench.WriteBackup(stdout, r)
		}
		if jerr := writeJSON(c.String("json"), stdout, rep); jerr != nil {
			return jerr
		}
		if err != nil {
			return err
		}
		return failed(rep)
	}
	app := &cli.App{
		Name:            "loadtest",
		Usage:           "load generator and benchmark driver for Sundial, side by side with Redis, beanstalkd and NATS",
		Writer:          stdout,
		ErrWriter:       stderr,
		OnUsageError:    onUsage,
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("unknown command %q: run 'loadtest --help'", c.Args().First())
			}
			_ = cli.ShowAppHelp(c)
			return usagef("missing command")
		},
		Commands: []*cli.Command{
			{
				Name:         bench.Throughput,
				Usage:        "publish as fast as each system takes it; msgs/s and publish latency",
				OnUsageError: onUsage,
				Flags: append(loadFlags(),
					&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to publish"},
					&cli.DurationFlag{Name: "delay-min", Value: time.Second, Usage: "shortest message delay"},
					&cli.DurationFlag{Name: "delay-max", Value: time.Hour, Usage: "longest message delay"},
				),
				Action: func(c *cli.Context) error {
					return runScenario(c, bench.Throughput, func(cfg *bench.Config) error {
						if err := positive(c, "duration"); err != nil {
							return err
						}
						cfg.Throughput.Duration, cfg.Throughput.DelayMin, cfg.Throughput.DelayMax = c.Duration("duration"), c.Duration("delay-min"), c.Duration("delay-max")
						if err := cfg.Throughput.Validate(); err != nil {
							return usagef("%v", err)
						}
						return nil
					})
				},
			},
			{
				Name:         bench.Burst,
				Usage:        "many messages due at one instant; drain rate and lateness",
				OnUsageError: onUsage,
				Flags:        fillFlags("messages due at once", 60*time.Second),
				Action: func(c *cli.Context) error {
					return runScenario(c, bench.Burst, func(cfg *bench.Config) (err error) {
						cfg.Burst.Messages, cfg.Burst.MaxFill, err = fill(c)
						return err
					})
				},
			},
			{
				Name:         bench.Precision,
				Usage:        "a steady rate with a fixed delay; delivery lateness and early deliveries",
				OnUsageError: onUsage,
				Flags: append(loadFlags(),
					&cli.IntFlag{Name: "rate", Value: 1000, Usage: "messages per second"},
					&cli.DurationFlag{Name: "delay", Value: 2 * time.Second, Usage: "delay of every message"},
					&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to publish"},
					&cli.DurationFlag{Name: "grace", Value: 5 * time.Second, Usage: "how long to wait for stragglers after the last due time"},
				),
				Action: func(c *cli.Context) error {
					return runScenario(c, bench.Precision, func(cfg *bench.Config) error {
						if err := rate(c); err != nil {
							return err
						}
						cfg.Precision.Rate, cfg.Precision.Delay, cfg.Precision.Duration, cfg.Precision.Grace = c.Int("rate"), c.Duration("delay"), c.Duration("duration"), c.Duration("grace")
						return positive(c, "delay", "duration", "grace")
					})
				},
			},
			{
				Name:         bench.Backlog,
				Usage:        "fill a pending backlog; RSS and disk, then restart and time the first due delivery",
				OnUsageError: onUsage,
				Flags:        fillFlags("pending messages (10000000 for the 10M target)", 120*time.Second),
				Action: func(c *cli.Context) error {
					return runScenario(c, bench.Backlog, func(cfg *bench.Config) (err error) {
						cfg.Backlog.Messages, cfg.Backlog.MaxFill, err = fill(c)
						return err
					})
				},
			},
			{
				Name:         bench.Failover,
				Usage:        "steady publish and consume, kill the node leading most shards; window and acked loss (Sundial)",
				OnUsageError: onUsage,
				Flags: append(loadFlags(),
					&cli.IntFlag{Name: "rate", Value: 2000, Usage: "messages per second"},
					&cli.DurationFlag{Name: "before", Value: 3 * time.Second, Usage: "publish this long before the kill"},
					&cli.DurationFlag{Name: "after", Value: 7 * time.Second, Usage: "publish this long after the kill"},
				),
				Action: func(c *cli.Context) error {
					return runScenario(c, bench.Failover, func(cfg *bench.Config) error {
						if err := rate(c); err != nil {
							return err
						}
						cfg.Failover.Rate, cfg.Failover.Before, cfg.Failover.After = c.Int("rate"), c.Duration("before"), c.Duration("after")
						cfg.Failover.Load.Batch = min(cfg.Failover.Load.Batch, 10)
						return positive(c, "before", "after")
					})
				},
			},
			{
				Name:         bench.Backup,
				Usage:        "fill a pending backlog, take a full backup, publish and ack more, take an incremental one, restore it into a new cluster; bytes and time of each against the targets (Sundial)",
				OnUsageError: onUsage,
				Flags: withTimeout(append(fillFlags("pending messages at the full backup, due in 1h", 10*time.Minute),
					&cli.Uint64Flag{Name: "changes", Value: 10_000, Usage: "messages due at once published before the full backup and acked after it, and messages (due in 1h) published after it: the change the incremental backup holds"},
					&cli.BoolFlag{Name: "restore", Value: true, Usage: "restore the incremental backup into a new cluster of the same shape, timed, and compare its pending count with the backed-up cluster's"},
				), 45*time.Minute),
				Action: func(c *cli.Context) error {
					return runScenario(c, bench.Backup, func(cfg *bench.Config) (err error) {
						if c.Uint64("changes") == 0 {
							return usagef("--changes: want at least 1")
						}
						cfg.Backup.Changes, cfg.Backup.NoRestore = c.Uint64("changes"), !c.Bool("restore")
						cfg.Backup.Messages, cfg.Backup.MaxFill, err = fill(c)
						return err
					})
				},
			},
			benchCommand(onUsage, stdout, stderr),
		},
	}
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "loadtest: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func benchCommand(onUsage cli.OnUsageErrorFunc, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:         "bench",
		Usage:        "run every scenario on Sundial and every peer; write docs/benchmarks.md and its SVG chart",
		OnUsageError: onUsage,
		Flags:        benchFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := benchConfig(c)
			if err != nil {
				return err
			}
			cfg.Progress = stderr
			var missing []string
			for _, s := range cfg.Systems {
				if _, err := s.BinaryPath(); err != nil {
					missing = append(missing, fmt.Sprintf("%s (%s)", s.Name, s.Binary))
				}
			}
			if len(missing) > 0 {
				fmt.Fprintf(stderr, "loadtest: MISSING peer binaries, these runs are skipped: %s — run scripts/install-peers.sh\n", strings.Join(missing, ", "))
			}
			if path := c.String("cpu-profile"); path != "" {
				stop, err := startCPUProfile(path)
				if err != nil {
					return err
				}
				defer stop()
			}
			rep, runErr := bench.RunAll(c.Context, cfg)
			fillDefaults(&rep)
			printRuns(stdout, rep.Runs)
			if err := writeJSON(c.String("json"), stdout, rep); err != nil {
				return err
			}
			if out := c.String("out"); out != "" {
				svgName := ""
				if svg := c.String("svg"); svg != "" {
					var sb strings.Builder
					if err := rep.SVG(&sb); err != nil {
						return err
					}
					if err := writeFile(svg, sb.String()); err != nil {
						return err
					}
					if rel, err := filepath.Rel(filepath.Dir(out), svg); err == nil {
						svgName = rel
					}
				}
				var sb strings.Builder
				rep.Markdown(&sb, svgName)
				if err := writeFile(out, sb.String()); err != nil {
					return err
				}
				fmt.Fprintf(stderr, "loadtest: wrote %s\n", out)
			}
			if runErr != nil {
				return runErr
			}
			return failed(rep)
		},
	}
}

// benchFlags are the flags of the bench command: the load flags and each
// scenario's size.
func benchFlags() []cli.Flag {
	return append(loadFlags(),
		&cli.StringFlag{Name: "scenarios", Value: strings.Join(bench.Scenarios, ","), Usage: "scenarios to run"},
		&cli.StringFlag{Name: "out", Value: "docs/benchmarks.md", Usage: "markdown report `FILE`"},
		&cli.StringFlag{Name: "svg", Value: "docs/benchmarks-lateness.svg", Usage: "lateness chart `FILE` (next to the report)"},
		&cli.DurationFlag{Name: "throughput-duration", Value: 10 * time.Second},
		&cli.Uint64Flag{Name: "burst-messages", Value: 200_000},
		&cli.DurationFlag{Name: "burst-max-fill", Value: 15 * time.Second},
		&cli.DurationFlag{Name: "precision-duration", Value: 10 * time.Second},
		&cli.Uint64Flag{Name: "backlog-messages", Value: 1_000_000, Usage: "pending messages in backlog (10000000 for the 10M target)"},
		&cli.DurationFlag{Name: "backlog-max-fill", Value: 25 * time.Second},
		&cli.StringFlag{Name: "raft-ceiling", Usage: "test binary of the broker's host package (go test -c): measure BenchmarkRaftCeiling first, for the Raft-ceiling target (make bench-peers builds it)"},
		&cli.DurationFlag{Name: "raft-ceiling-time", Value: 5 * time.Second, Usage: "benchtime of the Raft ceiling"},
	)
}

// benchConfig builds the bench command's run from its flags (benchFlags),
// or a usage error. Progress is left for the caller.
func benchConfig(c *cli.Context) (bench.Config, error) {
	l, err := load(c)
	if err != nil {
		return bench.Config{}, err
	}
	specs := target.Specs
	if c.IsSet("system") {
		if specs, err = parseSystems(c.String("system")); err != nil {
			return bench.Config{}, err
		}
	}
	var scs []string
	for _, s := range strings.Split(c.String("scenarios"), ",") {
		if !contains(bench.Scenarios, s) {
			return bench.Config{}, usagef("--scenarios %q: want a list of %s", s, strings.Join(bench.Scenarios, ","))
		}
		scs = append(scs, s)
	}
	cfg := bench.Config{Systems: specs, Scenarios: scs, Dir: c.String("dir"), SundialBinDir: c.String("bin-dir"), ProfileDir: c.String("profile-dir"), NoProfiles: !c.Bool("profiles"),
		ScenarioTimeout: c.Duration("timeout"), NoRequestIDs: !c.Bool("sundial-request-ids"), SundialPartitions: c.Int("sundial-partitions"),
		RaftCeilingBin: c.String("raft-ceiling"), RaftCeilingTime: c.Duration("raft-ceiling-time")}
	cfg.Throughput = scenario.ThroughputConfig{Load: l, Duration: c.Duration("throughput-duration")}
	cfg.Burst = scenario.BurstConfig{Load: l, Messages: c.Uint64("burst-messages"), MaxFill: c.Duration("burst-max-fill")}
	cfg.Precision = scenario.PrecisionConfig{Load: l, Rate: 1000, Delay: 2 * time.Second, Duration: c.Duration("precision-duration")}
	cfg.Backlog = scenario.BacklogConfig{Load: l, Messages: c.Uint64("backlog-messages"), MaxFill: c.Duration("backlog-max-fill")}
	fl := l
	fl.Batch = min(fl.Batch, 10)
	cfg.Failover = scenario.FailoverConfig{Load: fl, Rate: 2000}
	return cfg, nil
}

// fillDefaults records the effective configs (defaults applied by the
// scenarios) from the first result of each scenario.
func fillDefaults(rep *bench.Report) {
	for _, r := range rep.Runs {
		switch {
		case r.Throughput != nil:
			rep.Config.Throughput = r.Throughput.Config
		case r.Burst != nil:
			rep.Config.Burst = r.Burst.Config
		case r.Precision != nil:
			rep.Config.Precision = r.Precision.Config
		case r.Backlog != nil:
			rep.Config.Backlog = r.Backlog.Config
		case r.Failover != nil:
			rep.Config.Failover = r.Failover.Config
		case r.Backup != nil:
			rep.Config.Backup = &r.Backup.Config
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func failed(rep bench.Report) error {
	for _, r := range rep.Runs {
		if r.Error != "" {
			return errRunFailed
		}
	}
	return nil
}

func writeFile(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func writeJSON(path string, stdout io.Writer, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return writeFile(path, string(b))
}

func printRuns(w io.Writer, runs []bench.Run) {
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	t.AppendHeader(table.Row{"SCENARIO", "SYSTEM", "CONFIG", "RESULT"})
	for _, r := range runs {
		t.AppendRow(table.Row{r.Scenario, r.Name, r.Config, clip(bench.Summary(r))})
	}
	t.Render()
}

// clip keeps long error text from widening the table; the JSON report has
// it whole.
func clip(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return s
}
