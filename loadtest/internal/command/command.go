// Package command is loadtest's command line: it maps flags onto the
// scenario configs, runs a scenario against a proxy and prints the report
// (a table on stdout, optionally JSON to a file). Exit codes: 0 ok, 1 the
// run failed, 2 usage error.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proto/client"
)

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// Run runs loadtest with args and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	onUsage := func(_ *cli.Context, err error, _ bool) error { return &usageError{err.Error()} }
	common := func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "proxy", Value: client.DefaultAddr, EnvVars: []string{"SUNDIAL_PROXY"}, Usage: "proxy gRPC address(es), comma-separated"},
			&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "how long to publish"},
			&cli.StringFlag{Name: "json", Usage: "also write the report as JSON to `FILE` (- for stdout)"},
		}
	}
	app := &cli.App{
		Name:            "loadtest",
		Usage:           "load generator and benchmark driver for Sundial",
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
				Name:         "throughput",
				Usage:        "publish as fast as the cluster takes it; report msgs/s and publish latency",
				OnUsageError: onUsage,
				Flags: append(common(),
					&cli.IntFlag{Name: "concurrency", Value: 8, Usage: "producer goroutines"},
					&cli.IntFlag{Name: "batch", Value: 100, Usage: "messages per batch"},
					&cli.IntFlag{Name: "size", Value: 100, Usage: "payload bytes"},
					&cli.StringFlag{Name: "topic", Value: "loadtest", Usage: "topic"},
					&cli.DurationFlag{Name: "delay-min", Value: time.Second, Usage: "shortest message delay"},
					&cli.DurationFlag{Name: "delay-max", Value: time.Hour, Usage: "longest message delay"},
				),
				Action: func(c *cli.Context) error {
					cfg := scenario.ThroughputConfig{
						Topic: c.String("topic"), Duration: c.Duration("duration"), Concurrency: c.Int("concurrency"),
						Batch: c.Int("batch"), SizeBytes: c.Int("size"), DelayMin: c.Duration("delay-min"), DelayMax: c.Duration("delay-max"),
					}
					switch {
					case cfg.Duration <= 0:
						return usagef("--duration %v: want a positive duration", cfg.Duration)
					case cfg.Concurrency < 1 || cfg.Concurrency > 10000:
						return usagef("--concurrency %d: want 1..10000", cfg.Concurrency)
					case cfg.Batch < 1 || cfg.Batch > 100000:
						return usagef("--batch %d: want 1..100000", cfg.Batch)
					case cfg.SizeBytes < 0:
						return usagef("--size %d: want 0 or more", cfg.SizeBytes)
					}
					if err := cfg.Validate(); err != nil {
						return usagef("%v", err)
					}
					cl, err := client.Dial(c.Context, []string{c.String("proxy")})
					if err != nil {
						return err
					}
					defer cl.Close()
					fmt.Fprintf(stderr, "loadtest: throughput against %s for %v (concurrency %d, batch %d, %d-byte payloads)\n",
						c.String("proxy"), cfg.Duration, cfg.Concurrency, cfg.Batch, cfg.SizeBytes)
					res, runErr := scenario.Throughput(c.Context, cl, cfg)
					printThroughput(stdout, res)
					if err := writeJSON(c.String("json"), stdout, res); err != nil {
						return err
					}
					return runErr
				},
			},
			{
				Name:         "precision",
				Usage:        "publish at a steady rate with a fixed delay; report delivery lateness",
				OnUsageError: onUsage,
				Flags: append(common(),
					&cli.IntFlag{Name: "rate", Value: 1000, Usage: "messages per second"},
					&cli.DurationFlag{Name: "delay", Value: 2 * time.Second, Usage: "delay of every message"},
					&cli.StringFlag{Name: "topic", Value: "loadtest.precision", Usage: "topic"},
					&cli.DurationFlag{Name: "grace", Value: 5 * time.Second, Usage: "how long to wait for stragglers after the last due time"},
				),
				Action: func(c *cli.Context) error {
					cfg := scenario.PrecisionConfig{
						Topic: c.String("topic"), Rate: c.Int("rate"), Delay: c.Duration("delay"),
						Duration: c.Duration("duration"), Grace: c.Duration("grace"),
					}
					switch {
					case cfg.Rate < 1 || cfg.Rate > 1000000:
						return usagef("--rate %d: want 1..1000000", cfg.Rate)
					case cfg.Delay <= 0:
						return usagef("--delay %v: want a positive duration", cfg.Delay)
					case cfg.Duration <= 0:
						return usagef("--duration %v: want a positive duration", cfg.Duration)
					case cfg.Grace < 0:
						return usagef("--grace %v: want 0 or more", cfg.Grace)
					}
					cl, err := client.Dial(c.Context, []string{c.String("proxy")})
					if err != nil {
						return err
					}
					defer cl.Close()
					fmt.Fprintf(stderr, "loadtest: precision against %s: %d msg/s, delay %v, for %v\n",
						c.String("proxy"), cfg.Rate, cfg.Delay, cfg.Duration)
					res, runErr := scenario.Precision(c.Context, cl, cfg)
					printPrecision(stdout, res)
					if err := writeJSON(c.String("json"), stdout, res); err != nil {
						return err
					}
					return runErr
				},
			},
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
	return os.WriteFile(path, b, 0o644)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func newTable(w io.Writer) table.Writer {
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.SetStyle(table.StyleLight)
	return t
}

func printThroughput(w io.Writer, r scenario.ThroughputResult) {
	t := newTable(w)
	t.AppendHeader(table.Row{"METRIC", "VALUE"})
	t.AppendRows([]table.Row{
		{"published", r.Published},
		{"failed", r.Failed},
		{"elapsed", r.Elapsed.Round(time.Millisecond)},
		{"msgs/s", fmt.Sprintf("%.0f", r.MsgsPerS)},
		{"payload MB/s", fmt.Sprintf("%.2f", r.BytesPerS/1e6)},
		{"publish latency p50", ms(r.Latency.P50)},
		{"publish latency p99", ms(r.Latency.P99)},
		{"publish latency max", ms(r.Latency.Max)},
		{"batch latency p50", ms(r.BatchLatency.P50)},
		{"batch latency p99", ms(r.BatchLatency.P99)},
	})
	if r.FirstError != "" {
		t.AppendRow(table.Row{"first error", clip(r.FirstError)})
	}
	t.Render()
}

func printPrecision(w io.Writer, r scenario.PrecisionResult) {
	t := newTable(w)
	t.AppendHeader(table.Row{"METRIC", "VALUE"})
	t.AppendRows([]table.Row{
		{"published", r.Published},
		{"publish failed", r.Failed},
		{"received", r.Received},
		{"missing", r.Missing},
		{"duplicates", r.Duplicates},
		{"early", r.Early},
		{"lateness p50", ms(r.P50)},
		{"lateness p99", ms(r.P99)},
		{"lateness max", ms(r.Max)},
		{"lateness min", ms(r.Min)},
	})
	if r.FirstErr != "" {
		t.AppendRow(table.Row{"first error", clip(r.FirstErr)})
	}
	t.Render()
}

// clip keeps long error text from widening the table; the JSON report has
// it whole.
func clip(s string) string {
	if len(s) > 100 {
		return s[:97] + "..."
	}
	return s
}
