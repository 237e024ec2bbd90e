package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// RaftCeiling is what Raft replication alone carries on this machine,
// measured in the same run as the scenarios: the broker's
// BenchmarkRaftCeiling (3 NodeHosts with the broker's Dragonboat settings,
// 8 shards, a state machine that does nothing, Proposers goroutines each
// proposing 100 messages of 130 bytes at a time), run from a test binary
// built by `go test -c` (the loadtest module does not import Dragonboat).
type RaftCeiling struct {
	Proposers int     `json:"proposers"`
	MsgsPerS  float64 `json:"msgs_per_s"`
	// Error says why it was not measured.
	Error string `json:"error,omitempty"`
}

// ceilingProposers is the sub-benchmark run: as many proposers as the
// throughput scenario has producers.
const ceilingProposers = 8

// measureRaftCeiling runs the benchmark binary bin for about benchtime.
func measureRaftCeiling(ctx context.Context, bin string, benchtime time.Duration) RaftCeiling {
	c := RaftCeiling{Proposers: ceilingProposers}
	ctx, cancel := context.WithTimeout(ctx, 10*benchtime+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$",
		"-test.bench", fmt.Sprintf("^BenchmarkRaftCeiling$/^proposers=%d$", ceilingProposers),
		"-test.benchtime", benchtime.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.Error = fmt.Sprintf("%s: %v: %s", bin, err, clip(string(out), 200))
		return c
	}
	if c.MsgsPerS, err = parseRaftCeiling(out, ceilingProposers); err != nil {
		c.Error = err.Error()
	}
	return c
}

// parseRaftCeiling finds the msgs/s metric of the proposers=N result line
// in go test -bench output.
func parseRaftCeiling(out []byte, proposers int) (float64, error) {
	line := regexp.MustCompile(fmt.Sprintf(`^BenchmarkRaftCeiling/proposers=%d(-\d+)?\s`, proposers))
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if !line.MatchString(sc.Text()) {
			continue
		}
		fields := strings.Fields(sc.Text())
		for i := 1; i < len(fields); i++ {
			if fields[i] == "msgs/s" {
				v, err := strconv.ParseFloat(fields[i-1], 64)
				if err != nil {
					return 0, fmt.Errorf("raft ceiling: msgs/s %q: %w", fields[i-1], err)
				}
				return v, nil
			}
		}
		return 0, fmt.Errorf("raft ceiling: no msgs/s in %q", sc.Text())
	}
	return 0, fmt.Errorf("raft ceiling: no BenchmarkRaftCeiling/proposers=%d line in the output: %s", proposers, clip(string(out), 200))
}
