package bench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. Linux exports
// USER_HZ = 100 on every architecture Go supports (sysconf(_SC_CLK_TCK)
// needs cgo to read), so it is a constant here.
const userHZ = 100

// CPU is the processor time every server process of a system spent during
// one scenario, and that time per million messages.
type CPU struct {
	// Processes is how many server processes were measured.
	Processes int `json:"processes"`
	// Seconds is utime+stime summed over them, after minus before.
	Seconds float64 `json:"seconds"`
	// Messages is what the scenario moved (published; for burst and
	// precision also delivered and acked).
	Messages uint64 `json:"messages"`
	// PerMillion is Seconds per 1,000,000 Messages.
	PerMillion float64 `json:"seconds_per_million"`
}

// parseStatCPU returns utime+stime in clock ticks from the text of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// hold spaces and parentheses itself, so fields are counted after the last
// ')': there field 3 (state) is the first, and utime and stime (fields 14
// and 15) are the 12th and 13th.
func parseStatCPU(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("bench: /proc stat has no ')' after the command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat has %d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: /proc stat utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: /proc stat stime: %w", err)
	}
	return utime + stime, nil
}

// cpuSample is the CPU ticks of a set of processes at one moment.
type cpuSample struct {
	pids  []int
	ticks uint64
}

// sampleCPU reads utime+stime of every pid.
func sampleCPU(pids []int) (cpuSample, error) {
	s := cpuSample{pids: slices.Sorted(slices.Values(pids))}
	for _, pid := range s.pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return s, err
		}
		t, err := parseStatCPU(string(b))
		if err != nil {
			return s, fmt.Errorf("pid %d: %w", pid, err)
		}
		s.ticks += t
	}
	return s, nil
}

// cpuBetween is the CPU the processes of before spent until after, per
// million of msgs. It fails when the process set changed in between (a
// restart or a kill), since a process that left took its time with it.
func cpuBetween(before, after cpuSample, msgs uint64) (CPU, error) {
	if !slices.Equal(before.pids, after.pids) {
		return CPU{}, fmt.Errorf("bench: server processes changed during the scenario (%v → %v)", before.pids, after.pids)
	}
	if after.ticks < before.ticks {
		return CPU{}, fmt.Errorf("bench: CPU ticks went down (%d → %d)", before.ticks, after.ticks)
	}
	c := CPU{Processes: len(after.pids), Seconds: float64(after.ticks-before.ticks) / userHZ, Messages: msgs}
	c.PerMillion = perMillion(c.Seconds, msgs)
	return c, nil
}

// perMillion is seconds per 1,000,000 of msgs; 0 when msgs is 0.
func perMillion(seconds float64, msgs uint64) float64 {
	if msgs == 0 {
		return 0
	}
	return seconds * 1e6 / float64(msgs)
}

// cpuCell renders a CPU column cell.
func cpuCell(c *CPU) string {
	if c == nil || c.Messages == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f s", c.PerMillion)
}

// cpuPids are the processes whose CPU a scenario is charged: CPUPids when
// the system has more server processes than Pids reports (Sundial's
// proxy), else Pids.
func cpuPids(sys interface{ Pids() []int }) []int {
	if c, ok := sys.(interface{ CPUPids() []int }); ok {
		return c.CPUPids()
	}
	return sys.Pids()
}
