package command

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/loadtest/internal/bench"
)

// TestScenarioFlags checks the flags each scenario command parses before
// it starts any system: a bad value exits 2 with its message, and --help
// lists the flags with their defaults (docs/benchmarks.md quotes them).
func TestScenarioFlags(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // each in the output (stdout then stderr)
	}{
		{"burst no messages", []string{"burst", "--messages", "0"}, 2, []string{"loadtest: --messages: want at least 1"}},
		{"burst bad max-fill", []string{"burst", "--max-fill", "0s"}, 2, []string{"loadtest: --max-fill 0s: want a positive duration"}},
		{"backlog no messages", []string{"backlog", "--messages", "0"}, 2, []string{"loadtest: --messages: want at least 1"}},
		{"backlog bad max-fill", []string{"backlog", "--max-fill", "-1s"}, 2, []string{"loadtest: --max-fill -1s: want a positive duration"}},
		{"precision bad rate", []string{"precision", "--rate", "0"}, 2, []string{"loadtest: --rate 0: want 1..1000000"}},
		{"failover bad rate", []string{"failover", "--rate", "1000001"}, 2, []string{"loadtest: --rate 1000001: want 1..1000000"}},
		{"burst help", []string{"burst", "--help"}, 0, []string{
			"--messages value", "messages due at once (default: 1000000)", "--max-fill value", "stop filling after this long (default: 1m0s)",
		}},
		{"backlog help", []string{"backlog", "--help"}, 0, []string{
			"pending messages (10000000 for the 10M target) (default: 1000000)", "stop filling after this long (default: 2m0s)",
		}},
		{"backup no changes", []string{"backup", "--changes", "0"}, 2, []string{"loadtest: --changes: want at least 1"}},
		{"backup no messages", []string{"backup", "--messages", "0"}, 2, []string{"loadtest: --messages: want at least 1"}},
		{"backup help", []string{"backup", "--help"}, 0, []string{
			"pending messages at the full backup, due in 1h (default: 1000000)", "--changes value", "(default: 10000)",
			"--restore", "(default: true)", "bound on one scenario on one system (default: 45m0s)",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), append([]string{"loadtest"}, tc.args...), &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if code != tc.wantCode {
				t.Fatalf("Run(%q) = %d, want %d; output:\n%s", tc.args, code, tc.wantCode, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("Run(%q) output = %q, want it to contain %q", tc.args, out, w)
				}
			}
		})
	}
}

// TestBenchConfigPassesSundialKnobs checks that bench hands the Sundial
// flags every single-scenario command honours on to the runs it builds.
func TestBenchConfigPassesSundialKnobs(t *testing.T) {
	for _, tc := range []struct {
		name           string
		args           []string
		wantNoReqIDs   bool
		wantPartitions int
	}{
		{"defaults", nil, false, 0},
		{"knobs set", []string{"--sundial-request-ids=false", "--sundial-partitions", "3"}, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got bench.Config
			app := &cli.App{Name: "bench", Flags: benchFlags(), Action: func(c *cli.Context) (err error) {
				got, err = benchConfig(c)
				return err
			}}
			if err := app.Run(append([]string{"bench", "--system", "sundial"}, tc.args...)); err != nil {
				t.Fatalf("benchConfig(%q) error = %v", tc.args, err)
			}
			if got.NoRequestIDs != tc.wantNoReqIDs || got.SundialPartitions != tc.wantPartitions {
				t.Errorf("benchConfig(%q): NoRequestIDs %v, SundialPartitions %d; want %v, %d",
					tc.args, got.NoRequestIDs, got.SundialPartitions, tc.wantNoReqIDs, tc.wantPartitions)
			}
		})
	}
}

// TestBenchWritesCPUProfile checks that bench honours --cpu-profile like
// the single-scenario commands. The one run it asks for (failover on one
// broker) is skipped before any process starts.
func TestBenchWritesCPUProfile(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "client.pprof")
	args := []string{"loadtest", "bench", "--system", "sundial-rf1", "--scenarios", "failover", "--dir", dir,
		"--out", "", "--svg", "", "--cpu-profile", profile}
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("Run(%q) = %d, want 0; output:\n%s%s", args, code, stdout.String(), stderr.String())
	}
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Errorf("bench --cpu-profile: profile %s: %v (size %d), want a written profile", profile, err, sizeOf(fi))
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}
