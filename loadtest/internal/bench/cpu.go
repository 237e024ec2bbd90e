package bench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sundialmq/sundial/loadtest/internal/target"
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
	// Parts splits Seconds by the role of the processes (Sundial: brokers
	// and proxy), in the system's order; nil for a system whose server is
	// one role (a peer's single process).
	Parts []CPUPart `json:"parts,omitempty"`
}

// CPUPart is the share of a CPU that the processes of one role spent.
type CPUPart struct {
	Role       string  `json:"role"`
	Processes  int     `json:"processes"`
	Seconds    float64 `json:"seconds"`
	PerMillion float64 `json:"seconds_per_million"`
}

// part is the share of role, or nil when c has none.
func (c *CPU) part(role string) *CPUPart {
	if c == nil {
		return nil
	}
	for i := range c.Parts {
		if c.Parts[i].Role == role {
			return &c.Parts[i]
		}
	}
	return nil
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
	// byPid is ticks per process; ticks is their sum.
	byPid map[int]uint64
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return string(b), err
}

// sampleCPU reads utime+stime of every pid from /proc.
func sampleCPU(pids []int) (cpuSample, error) { return sampleCPUWith(readProcStat, pids) }

// sampleCPUWith reads utime+stime of every pid with read, which returns
// the text of /proc/<pid>/stat.
func sampleCPUWith(read func(pid int) (string, error), pids []int) (cpuSample, error) {
	s := cpuSample{pids: slices.Sorted(slices.Values(pids)), byPid: make(map[int]uint64, len(pids))}
	for _, pid := range s.pids {
		stat, err := read(pid)
		if err != nil {
			return s, err
		}
		t, err := parseStatCPU(stat)
		if err != nil {
			return s, fmt.Errorf("pid %d: %w", pid, err)
		}
		s.byPid[pid] = t
		s.ticks += t
	}
	return s, nil
}

// cpuBetween is the CPU the processes of before spent until after, per
// million of msgs, split into groups when there is more than one. It fails
// when the process set changed in between (a restart or a kill), since a
// process that left took its time with it.
func cpuBetween(before, after cpuSample, groups []target.ProcessGroup, msgs uint64) (CPU, error) {
	if !slices.Equal(before.pids, after.pids) {
		return CPU{}, fmt.Errorf("bench: server processes changed during the scenario (%v → %v)", before.pids, after.pids)
	}
	if after.ticks < before.ticks {
		return CPU{}, fmt.Errorf("bench: CPU ticks went down (%d → %d)", before.ticks, after.ticks)
	}
	c := CPU{Processes: len(after.pids), Seconds: float64(after.ticks-before.ticks) / userHZ, Messages: msgs}
	c.PerMillion = perMillion(c.Seconds, msgs)
	if len(groups) < 2 {
		return c, nil
	}
	for _, g := range groups {
		p := CPUPart{Role: g.Role, Processes: len(g.Pids)}
		var ticks uint64
		for _, pid := range g.Pids {
			b, okB := before.byPid[pid]
			a, okA := after.byPid[pid]
			if !okB || !okA {
				return CPU{}, fmt.Errorf("bench: %s process %d was not sampled", g.Role, pid)
			}
			if a < b {
				return CPU{}, fmt.Errorf("bench: CPU ticks of %s process %d went down (%d → %d)", g.Role, pid, b, a)
			}
			ticks += a - b
		}
		p.Seconds = float64(ticks) / userHZ
		p.PerMillion = perMillion(p.Seconds, msgs)
		c.Parts = append(c.Parts, p)
	}
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

// splitCell renders the "brokers / proxy / client" cell: the brokers' and
// the proxy's shares of a Sundial run's CPU, then the load generator's
// own CPU, each per million messages; "–" for a part that has no figure
// (a peer has no brokers or proxy: its one server is the CPU column).
func splitCell(r Run) string {
	var cells []string
	some := false
	for _, p := range []*CPUPart{r.CPU.part(target.RoleBrokers), r.CPU.part(target.RoleProxy)} {
		if p == nil || r.CPU.Messages == 0 {
			cells = append(cells, "–")
			continue
		}
		cells, some = append(cells, fmt.Sprintf("%.1f", p.PerMillion)), true
	}
	if c := r.ClientCPU; c != nil && c.Messages > 0 {
		cells, some = append(cells, fmt.Sprintf("%.1f", c.PerMillion)), true
	} else {
		cells = append(cells, "–")
	}
	if !some {
		return "–"
	}
	return strings.Join(cells, " / ") + " s"
}

// cpuGroups are the processes whose CPU a scenario is charged, by role:
// CPUGroups when the system has more server processes than Pids reports
// (Sundial's proxy), else Pids as one group.
func cpuGroups(sys interface{ Pids() []int }) []target.ProcessGroup {
	if c, ok := sys.(interface{ CPUGroups() []target.ProcessGroup }); ok {
		return c.CPUGroups()
	}
	return []target.ProcessGroup{{Role: "server", Pids: sys.Pids()}}
}

// endpoints are the HTTP addresses of a system's server processes that
// serve /metrics and /debug/pprof (Sundial's); nil for a peer.
func endpoints(sys any) []target.Endpoint {
	if e, ok := sys.(interface{ Endpoints() []target.Endpoint }); ok {
		return e.Endpoints()
	}
	return nil
}

// groupPids are the pids of every group.
func groupPids(groups []target.ProcessGroup) []int {
	var pids []int
	for _, g := range groups {
		pids = append(pids, g.Pids...)
	}
	return pids
}
