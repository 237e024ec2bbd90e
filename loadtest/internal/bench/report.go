package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/target"
)

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "0 ms"
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.2f ms", v)
	case math.Abs(v) < 1000:
		return fmt.Sprintf("%.0f ms", v)
	default:
		return fmt.Sprintf("%.2f s", v/1000)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func count(n uint64) string {
	s := fmt.Sprint(n)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// Advantage is how many times better Sundial's figure is than a peer's:
// sundial/peer when higher is better, peer/sundial when lower is better.
// ok is false when either figure is missing or zero.
func Advantage(sundial, peer float64, higherBetter bool) (float64, bool) {
	if sundial <= 0 || peer <= 0 || math.IsNaN(sundial) || math.IsNaN(peer) {
		return 0, false
	}
	if higherBetter {
		return sundial / peer, true
	}
	return peer / sundial, true
}

// advantage renders the Sundial × cell of the row of system name: the
// baseline (Sundial RF 3) and Sundial's other rows compare with no peer.
func advantage(sundial, peer float64, higherBetter bool, name string) string {
	if name == "sundial" {
		return "1.00× (baseline)"
	}
	if strings.HasPrefix(name, "sundial") {
		return "– (Sundial)"
	}
	v, ok := Advantage(sundial, peer, higherBetter)
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func (rep Report) runs(scenario string) []Run {
	var out []Run
	for _, r := range rep.Runs {
		if r.Scenario == scenario {
			out = append(out, r)
		}
	}
	return out
}

// find is the run of system name in scenario, or nil.
func (rep Report) find(scenario, name string) *Run {
	for i, r := range rep.Runs {
		if r.Scenario == scenario && r.Name == name {
			return &rep.Runs[i]
		}
	}
	return nil
}

// targets10 checks issue 10's targets: each Sundial ratio against a Redis
// row of the same run, precision lateness, and the RF 3 cluster's CPU at
// the precision scenario's steady rate (its servers' CPU per message ×
// that rate, in cores).
func (rep Report) targets10(w io.Writer, yes func(bool) string) {
	type ratio struct {
		label, scenario, sundial, peer string
		min                            float64
	}
	figure := func(r *Run) float64 {
		switch {
		case r == nil:
			return 0
		case r.Throughput != nil:
			return r.Throughput.MsgsPerS
		case r.Burst != nil:
			return r.Burst.DrainRate
		}
		return 0
	}
	var rows [][3]string
	for _, t := range []ratio{
		{"Durable publish, RF 1 ≥ 1.0× Redis always", Throughput, "sundial-rf1", "redis-always", 1.0},
		{"Durable publish, RF 3 ≥ 0.5× Redis always", Throughput, "sundial", "redis-always", 0.5},
		{"Burst drain, RF 1 ≥ 1.0× Redis always", Burst, "sundial-rf1", "redis-always", 1.0},
		{"Burst drain, RF 3 ≥ 0.3× Redis everysec", Burst, "sundial", "redis-everysec", 0.3},
	} {
		s, p := figure(rep.find(t.scenario, t.sundial)), figure(rep.find(t.scenario, t.peer))
		if s <= 0 || p <= 0 {
			continue
		}
		rows = append(rows, [3]string{t.label, fmt.Sprintf("%.2f× (%.0f vs %.0f msgs/s)", s/p, s, p), yes(s/p >= t.min)})
	}
	for _, t := range []struct {
		label, name string
		p99         time.Duration
	}{{"Precision, RF 1: p50 ≤ 2 ms, p99 ≤ 5 ms, 0 early", "sundial-rf1", 5 * time.Millisecond}, {"Precision, RF 3: p50 ≤ 2 ms, p99 ≤ 10 ms, 0 early", "sundial", 10 * time.Millisecond}} {
		if r := rep.find(Precision, t.name); r != nil && r.Precision != nil {
			p := r.Precision
			rows = append(rows, [3]string{t.label, fmt.Sprintf("p50 %s, p99 %s, %d early", ms(p.Lateness.P50), ms(p.Lateness.P99), p.Early),
				yes(p.Lateness.P50 <= 2*time.Millisecond && p.Lateness.P99 <= t.p99 && p.Early == 0)})
		}
	}
	if r := rep.find(Precision, "sundial"); r != nil && r.SteadyCPU != nil && rep.Config.Precision.Rate > 0 {
		sc := r.SteadyCPU
		measured := fmt.Sprintf("%.2f cores over the %.0f s steady state", sc.Cores, sc.Window)
		if b, p := steadyPart(sc, target.RoleBrokers), steadyPart(sc, target.RoleProxy); b != nil && p != nil {
			measured += fmt.Sprintf(" (brokers %.2f, proxy %.2f)", b.Seconds, p.Seconds)
		}
		rows = append(rows, [3]string{fmt.Sprintf("CPU at %d msgs/s (precision, RF 3): ≤ 0.45 cores for the whole cluster", rep.Config.Precision.Rate),
			measured, yes(sc.Cores <= 0.45)})
	} else if r != nil && r.CPU != nil && r.CPU.Messages > 0 && rep.Config.Precision.Rate > 0 {
		rate := float64(rep.Config.Precision.Rate)
		cores := func(perMillion float64) float64 { return perMillion * rate / 1e6 }
		measured := fmt.Sprintf("%.2f cores", cores(r.CPU.PerMillion))
		if b, p := r.CPU.part(target.RoleBrokers), r.CPU.part(target.RoleProxy); b != nil && p != nil {
			measured += fmt.Sprintf(" (brokers %.2f, proxy %.2f", cores(b.PerMillion), cores(p.PerMillion))
			if c := r.ClientCPU; c != nil && c.Messages > 0 {
				measured += fmt.Sprintf("; client %.2f more", cores(c.PerMillion))
			}
			measured += ")"
		}
		rows = append(rows, [3]string{fmt.Sprintf("CPU at %d msgs/s (precision, RF 3): ≤ 0.45 cores for the whole cluster", rep.Config.Precision.Rate),
			measured, yes(cores(r.CPU.PerMillion) <= 0.45)})
	}
	// The cost of security, side by side in the same run: TLS on every
	// hop and tokens against the same RF 3 cluster in plaintext, open.
	if s, p := rep.find(Throughput, "sundial-tls"), rep.find(Throughput, "sundial"); figure(s) > 0 && figure(p) > 0 {
		v := figure(s) / figure(p)
		rows = append(rows, [3]string{"Durable publish, RF 3 with TLS + tokens ≥ 0.85× the same without (≤ 15% fewer msgs/s)",
			fmt.Sprintf("%.2f× (%.0f vs %.0f msgs/s)", v, figure(s), figure(p)), yes(v >= 0.85)})
		if s.CPU != nil && p.CPU != nil && s.CPU.PerMillion > 0 && p.CPU.PerMillion > 0 {
			c := s.CPU.PerMillion / p.CPU.PerMillion
			rows = append(rows, [3]string{"Server CPU per message, RF 3 with TLS + tokens ≤ 1.2× the same without",
				fmt.Sprintf("%.2f× (%.1f vs %.1f s per 1M msgs)", c, s.CPU.PerMillion, p.CPU.PerMillion), yes(c <= 1.2)})
		}
	}
	if c, r := rep.RaftCeiling, rep.find(Throughput, "sundial"); c != nil && c.MsgsPerS > 0 && r != nil && r.Throughput != nil && r.Throughput.MsgsPerS > 0 {
		v := r.Throughput.MsgsPerS / c.MsgsPerS
		rows = append(rows, [3]string{"Durable publish, RF 3 ≥ 0.6× the no-op Raft ceiling (same run)",
			fmt.Sprintf("%.2f× (%.0f vs %.0f msgs/s)", v, r.Throughput.MsgsPerS, c.MsgsPerS), yes(v >= 0.6)})
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "## Targets (issue 10)\n\n")
	header(w, "Target", "Measured", "Met")
	for _, r := range rows {
		row(w, r[0], r[1], r[2])
	}
	fmt.Fprintln(w)
}

// steadyPart is the cores of role in s, or nil.
func steadyPart(s *SteadyCPU, role string) *CPUPart {
	for i := range s.Parts {
		if s.Parts[i].Role == role {
			return &s.Parts[i]
		}
	}
	return nil
}

func (rep Report) sundial(scenario string) *Run {
	for i, r := range rep.Runs {
		if r.Scenario == scenario && r.Name == "sundial" {
			return &rep.Runs[i]
		}
	}
	return nil
}

func row(w io.Writer, cells ...string) {
	for i := range cells {
		cells[i] = strings.ReplaceAll(cells[i], "|", "\\|")
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func header(w io.Writer, cells ...string) {
	row(w, cells...)
	seps := make([]string, len(cells))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
}

func durable(r Run) string {
	if r.Durable {
		return "yes"
	}
	return "no"
}

// notRun renders a row for a run without figures.
func notRun(w io.Writer, r Run, cols int) bool {
	msg := ""
	switch {
	case r.Skipped != "":
		msg = "skipped: " + r.Skipped
	case r.Error != "" && r.Throughput == nil && r.Burst == nil && r.Precision == nil && r.Backlog == nil && r.Failover == nil:
		msg = "failed: " + clip(r.Error, 160)
	default:
		return false
	}
	cells := []string{r.System, r.Config, msg}
	for len(cells) < cols {
		cells = append(cells, "")
	}
	row(w, cells...)
	return true
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

// Markdown writes the report. svgName is the chart's file name relative
// to the markdown file ("" for none).
func (rep Report) Markdown(w io.Writer, svgName string) {
	m := rep.Machine
	fmt.Fprintf(w, "# Sundial benchmarks: side by side with Redis, beanstalkd and NATS JetStream\n\n")
	fmt.Fprintf(w, "Generated by `make bench-peers` (`bin/loadtest bench`); do not edit by hand.\n\n")
	fmt.Fprintf(w, "- **Machine:** %d cores (%s), %.1f GiB memory, %s\n", m.Cores, m.CPU, float64(m.MemoryBytes)/(1<<30), m.Kernel)
	fmt.Fprintf(w, "- **Go:** %s\n", m.GoVersion)
	fmt.Fprintf(w, "- **Peers:** %s\n", m.Versions)
	fmt.Fprintf(w, "- **Date:** %s; the whole run took %v\n", rep.Started.UTC().Format("2006-01-02 15:04 MST"), rep.Elapsed.Round(time.Second))
	l := rep.Config.Throughput.Load
	fmt.Fprintf(w, "- **Client shape, the same for every system:** %d producers with one batch of %d messages in flight each; %d consumer workers with a prefetch of %d; %d-byte payloads. Every server runs on this machine, on 127.0.0.1, started fresh for each scenario.\n\n", l.Concurrency, l.Batch, l.Concurrency, l.Batch, l.SizeBytes)
	fmt.Fprintf(w, "The **Sundial ×** column is how many times better Sundial's figure is than the row's (higher-is-better figures: Sundial ÷ row; lower-is-better: row ÷ Sundial), so above 1 means Sundial wins. *Durable* means a publish is acknowledged only after an fsync (Sundial RF 3: on a quorum of 3 replicas; Sundial RF 1 and the peers keep a single copy). *CPU / 1M msgs* is the processor time (utime + stime from /proc/<pid>/stat, after minus before the scenario) of every server process — Sundial's brokers and proxy, each peer's server — per million messages the scenario published (burst and precision also deliver and ack each of them). *Brokers / proxy / client* splits that figure and adds the client, each per million messages: for Sundial, all brokers together and the proxy (the two add up to the CPU column); for every system, the client — this loadtest process: the load generator and the system's client library, on the same cores — which the CPU column does not count. A peer's server is one process, so its brokers and proxy parts are –.\n\n")
	fmt.Fprintf(w, "How each system is driven: see [How the peers are driven](#how-the-peers-are-driven) at the end.\n\n")

	rep.throughputTable(w)
	rep.profileTable(w, Throughput)
	rep.burstTable(w)
	rep.profileTable(w, Burst)
	rep.precisionTable(w, svgName)
	rep.profileTable(w, Precision)
	rep.backlogTable(w)
	rep.failoverTable(w)
	rep.targets(w)
	fmt.Fprint(w, drivers)
}

func (rep Report) throughputTable(w io.Writer) {
	c := rep.Config.Throughput
	fmt.Fprintf(w, "## Throughput\n\nPublish for %v at full speed, delays uniform in [%v, %v]. Latency is per publish call (one batch).\n\n", c.Duration, c.DelayMin, c.DelayMax)
	header(w, "System", "Configuration", "Durable", "Published", "msgs/s", "Publish p50", "Publish p99", "CPU / 1M msgs", "Brokers / proxy / client", "Sundial ×")
	base := rep.sundial(Throughput)
	for _, r := range rep.runs(Throughput) {
		if notRun(w, r, 10) || r.Throughput == nil {
			continue
		}
		t := r.Throughput
		var bv float64
		if base != nil && base.Throughput != nil {
			bv = base.Throughput.MsgsPerS
		}
		row(w, r.System, r.Config, durable(r), count(t.Published), fmt.Sprintf("%.0f", t.MsgsPerS), ms(t.BatchLatency.P50), ms(t.BatchLatency.P99), cpuCell(r.CPU), splitCell(r),
			advantage(bv, t.MsgsPerS, true, r.Name))
	}
	fmt.Fprintln(w)
	if c := rep.RaftCeiling; c != nil {
		if c.Error != "" {
			fmt.Fprintf(w, "**Raft ceiling:** not measured: %s\n\n", clip(c.Error, 200))
		} else {
			fmt.Fprintf(w, "**Raft ceiling** (measured first in this run, nothing else running): `BenchmarkRaftCeiling/proposers=%d` — 3 Dragonboat NodeHosts with the broker's settings, 8 shards, a state machine that does nothing, %d proposers of 100 × 130-byte messages — carried **%.0f msgs/s**: what three fsynced Raft replicas on these two cores allow before any state machine, gRPC or proxy work.\n\n",
				c.Proposers, c.Proposers, c.MsgsPerS)
		}
	}
}

func (rep Report) burstTable(w io.Writer) {
	c := rep.Config.Burst
	fmt.Fprintf(w, "## Burst\n\nUp to %s messages all due at one instant (the fill stops after %v for slow systems: see *Published*), consumers already waiting. Drain rate = delivered and acked messages ÷ time from the due instant to the last delivery.\n\n", count(c.Messages), c.MaxFill)
	header(w, "System", "Configuration", "Published", "Delivered", "Drain msgs/s", "Lateness p50", "p99", "max", "Early", "CPU / 1M msgs", "Brokers / proxy / client", "Sundial × (drain)")
	base := rep.sundial(Burst)
	for _, r := range rep.runs(Burst) {
		if notRun(w, r, 12) || r.Burst == nil {
			continue
		}
		b := r.Burst
		var bv float64
		if base != nil && base.Burst != nil {
			bv = base.Burst.DrainRate
		}
		row(w, r.System, r.Config, count(b.Published), count(b.Delivered), fmt.Sprintf("%.0f", b.DrainRate), ms(b.Lateness.P50), ms(b.Lateness.P99), ms(b.Lateness.Max),
			fmt.Sprint(b.Early), cpuCell(r.CPU), splitCell(r), advantage(bv, b.DrainRate, true, r.Name))
	}
	fmt.Fprintln(w)
}

func (rep Report) precisionTable(w io.Writer, svgName string) {
	c := rep.Config.Precision
	fmt.Fprintf(w, "## Precision\n\nA steady %d msgs/s for %v, each due %v after its scheduled send time; lateness = consumer receive time − due time.\n\n", c.Rate, c.Duration, c.Delay)
	header(w, "System", "Configuration", "Published", "Received", "Lateness p50", "p99", "max", "Early", "CPU / 1M msgs", "Brokers / proxy / client", "Sundial × (p99)")
	base := rep.sundial(Precision)
	for _, r := range rep.runs(Precision) {
		if notRun(w, r, 11) || r.Precision == nil {
			continue
		}
		p := r.Precision
		var bv float64
		if base != nil && base.Precision != nil {
			bv = float64(base.Precision.Lateness.P99)
		}
		row(w, r.System, r.Config, count(p.Published), count(p.Received), ms(p.Lateness.P50), ms(p.Lateness.P99), ms(p.Lateness.Max),
			fmt.Sprint(p.Early), cpuCell(r.CPU), splitCell(r), advantage(bv, float64(p.Lateness.P99), false, r.Name))
	}
	fmt.Fprintln(w)
	var steady []string
	for _, r := range rep.runs(Precision) {
		if sc := r.SteadyCPU; sc != nil {
			cell := fmt.Sprintf("%s %s %.2f", r.System, r.Config, sc.Cores)
			if b, p := steadyPart(sc, target.RoleBrokers), steadyPart(sc, target.RoleProxy); b != nil && p != nil {
				cell += fmt.Sprintf(" (brokers %.2f, proxy %.2f)", b.Seconds, p.Seconds)
			}
			steady = append(steady, cell)
		}
	}
	if len(steady) > 0 {
		fmt.Fprintf(w, "**Server CPU at the steady rate**, in cores (CPU seconds per second of every server process, over the %v from the first message due to the last send, when messages are published and come due at %d/s; the CPU column also counts the wait before and the drain after): %s.\n\n",
			c.Duration-c.Delay, c.Rate, strings.Join(steady, "; "))
	}
	if svgName != "" {
		fmt.Fprintf(w, "![Lateness distributions (precision and burst)](%s)\n\n", svgName)
	}
}

func (rep Report) backlogTable(w io.Writer) {
	c := rep.Config.Backlog
	fmt.Fprintf(w, "## Backlog\n\nFill up to %s messages due in %v (the fill stops after %v: see *Pending*), read RSS and bytes on disk, then restart every server process and time the first delivery of a message that came due while it was down. RSS is per process (per broker for Sundial); *RSS/msg* is the growth of the largest process per pending message.\n\n", count(c.Messages), c.Delay, c.MaxFill)
	header(w, "System", "Configuration", "Pending", "Fill msgs/s", "Max RSS", "RSS/msg", "Disk", "Ready after restart", "First due delivery", "Sundial × (RSS/msg)")
	base := rep.sundial(Backlog)
	for _, r := range rep.runs(Backlog) {
		if notRun(w, r, 10) || r.Backlog == nil {
			continue
		}
		b := r.Backlog
		var bv float64
		if base != nil && base.Backlog != nil {
			bv = base.Backlog.RSSPerMsgBytes
		}
		first := ms(b.FirstDue)
		if b.CanariesDelivered == 0 {
			first = "none delivered"
		}
		row(w, r.System, r.Config, count(b.Published), fmt.Sprintf("%.0f", b.FillRate), mib(b.MaxRSSBytes), fmt.Sprintf("%.0f B", b.RSSPerMsgBytes),
			mib(b.DiskBytes), ms(b.ReadyAfter), first, advantage(bv, b.RSSPerMsgBytes, false, r.Name))
	}
	fmt.Fprintln(w)
}

func (rep Report) failoverTable(w io.Writer) {
	c := rep.Config.Failover
	fmt.Fprintf(w, "## Failover\n\nPublish %d msgs/s (batches of %d) while consumers ack; after %v SIGKILL the broker leading the most shards; keep publishing for %v; then wait for every acknowledged message. *Window* = the longer of the longest publish stall after the kill and the end of the last failed publish.\n\n", c.Rate, c.Load.Batch, c.Before, c.After)
	header(w, "System", "Configuration", "Killed", "Published (acked)", "Failed", "Window", "Delivered", "Lost acked")
	for _, r := range rep.runs(Failover) {
		if notRun(w, r, 8) || r.Failover == nil {
			continue
		}
		f := r.Failover
		row(w, r.System, r.Config, f.Killed, count(f.Published), count(f.Failed), ms(f.Window), count(f.Delivered), count(f.Lost))
	}
	fmt.Fprintln(w)
}

// targets checks the targets against this run.
func (rep Report) targets(w io.Writer) {
	fmt.Fprintf(w, "## Targets (issue 4)\n\n")
	header(w, "Target", "Measured", "Met")
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "**no**"
	}
	if base := rep.sundial(Throughput); base != nil && base.Throughput != nil {
		best, bestName := 0.0, ""
		var evsec float64
		for _, r := range rep.runs(Throughput) {
			if r.Throughput == nil || strings.HasPrefix(r.Name, "sundial") {
				continue
			}
			if r.Durable && r.Throughput.MsgsPerS > best {
				best, bestName = r.Throughput.MsgsPerS, r.Name
			}
			if r.Name == "redis-everysec" {
				evsec = r.Throughput.MsgsPerS
			}
		}
		if best > 0 {
			v := base.Throughput.MsgsPerS / best
			row(w, "Durable publish ≥ 1.0× best fully durable peer", fmt.Sprintf("%.2f× (%.0f vs %s %.0f msgs/s)", v, base.Throughput.MsgsPerS, bestName, best), yes(v >= 1))
		}
		if evsec > 0 {
			v := base.Throughput.MsgsPerS / evsec
			row(w, "Stretch: ≥ 1.0× Redis everysec", fmt.Sprintf("%.2f×", v), yes(v >= 1))
		}
	}
	if base := rep.sundial(Burst); base != nil && base.Burst != nil {
		best, bestName := 0.0, ""
		for _, r := range rep.runs(Burst) {
			if r.Burst != nil && !strings.HasPrefix(r.Name, "sundial") && r.Burst.DrainRate > best {
				best, bestName = r.Burst.DrainRate, r.Name
			}
		}
		if best > 0 {
			v := base.Burst.DrainRate / best
			row(w, "Burst drain ≥ 2× best peer", fmt.Sprintf("%.2f× (%.0f vs %s %.0f msgs/s)", v, base.Burst.DrainRate, bestName, best), yes(v >= 2))
		}
	}
	if base := rep.sundial(Precision); base != nil && base.Precision != nil {
		p := base.Precision
		row(w, "Precision p50 ≤ 2 ms, p99 ≤ 5 ms, 0 early", fmt.Sprintf("p50 %s, p99 %s, %d early", ms(p.Lateness.P50), ms(p.Lateness.P99), p.Early),
			yes(p.Lateness.P50 <= 2*time.Millisecond && p.Lateness.P99 <= 5*time.Millisecond && p.Early == 0))
	}
	if base := rep.sundial(Backlog); base != nil && base.Backlog != nil {
		b := base.Backlog
		row(w, fmt.Sprintf("Backlog RSS ≤ 256 MiB per node (measured at %s pending; target is at 10M)", count(b.Published)), mib(b.MaxRSSBytes), yes(b.MaxRSSBytes <= 256<<20)+" at this size")
		row(w, "Restart: first due delivery ≤ 5 s", ms(b.FirstDue), yes(b.CanariesDelivered > 0 && b.FirstDue <= 5*time.Second)+" at this size")
	}
	if base := rep.sundial(Failover); base != nil && base.Failover != nil {
		f := base.Failover
		row(w, "Failover window ≤ 1 s, zero acked loss", fmt.Sprintf("%s, %d lost", ms(f.Window), f.Lost), yes(f.Window <= time.Second && f.Lost == 0))
	}
	fmt.Fprintln(w)
	rep.targets10(w, yes)
	fmt.Fprintf(w, "Where a target is missed, [performance.md](performance.md) measures the limit behind the gap; it also has the 10M-pending backlog run.\n\n")
}

const drivers = `## How the peers are driven

- **Sundial** — the Go SDK (` + "`proto/client`" + `) through the proxy: one ` + "`Publish`" + ` call per batch with ` + "`deliver_at_unix_ms`" + `; one ` + "`Subscribe`" + ` stream with credit = workers × prefetch, each delivery acked over the stream (` + "`Delivery.Ack`" + ` waits for the ack result). The topic has one partition per shard. Three clusters: 3 brokers (RF 3, the *Sundial ×* baseline), the same with TLS on every hop and tokens (` + "`sundial-tls`" + `: clients → proxy, proxy → brokers, brokers → brokers and Dragonboat's mutual TLS, certificates of a CA made for the run; the proxy's authentication on, every call with a bearer token, receipts signed; its ratio to the baseline is the cost of security) and 1 broker (` + "`sundial-rf1`" + `: RF 1, one fsynced copy like the peers).
- **Redis** (go-redis v9) — a sorted set scored by due time (ms) holds the messages; a batch is one ` + "`ZADD`" + `. Each consumer worker runs a Lua claim script that atomically takes up to *prefetch* due members (and expired leases), moves them to a processing sorted set scored by a 30 s lease deadline, and otherwise returns the next due score so the worker sleeps until then (at most 50 ms); the ack is one ` + "`ZREM`" + ` per claimed batch. ` + "`appendonly yes`" + ` with ` + "`appendfsync always`" + ` (fsync before replies) or ` + "`everysec`" + `, RDB snapshots off.
- **beanstalkd** (go-beanstalk v0.2.0) — ` + "`put`" + ` with a delay (beanstalkd's delay unit is the whole second: the driver rounds up and measures lateness against the due time it actually asked for, so a burst's due times spread over up to 1 s); a batch is its puts pipelined on one connection. Each consumer worker is one connection doing ` + "`reserve`" + ` then ` + "`delete`" + ` (beanstalkd has no batch reserve, so prefetch is 1). Binlog (` + "`-b`" + `) with ` + "`-f0`" + ` (fsync every write) or ` + "`-f1000`" + `.
- **NATS JetStream** (nats.go v1.55.0, nats-server v2.12) — a file-backed work-queue stream with ` + "`allow_msg_schedules`" + `; every message is a schedule on its own subject (a subject holds one schedule) with ` + "`Nats-Schedule: @at <RFC 3339 time>`" + ` and ` + "`Nats-Schedule-Target`" + ` set to the stream's ` + "`due`" + ` subject; a batch is its messages published asynchronously and then every PubAck awaited. Each consumer worker is a ` + "`Consume`" + ` subscription pulling *prefetch* messages on a durable consumer, acking each with ` + "`Ack`" + `. ` + "`sync_interval: always`" + ` or the default (2 min). nats-server v2.12 fires schedules from a timer that runs at most every 250 ms (server/scheduler.go), which bounds its precision.
- **CPU accounting** — before and after each scenario the driver reads utime + stime from ` + "`/proc/<pid>/stat`" + ` of every server process (Sundial: each broker and the proxy; a peer: its server) and of the loadtest process itself (the client: load generator, SDK or client library, and for Sundial the cluster supervision; child processes are not in it). *CPU / 1M msgs* is the servers' difference per million messages; *Brokers / proxy / client* gives Sundial's brokers (summed) and proxy separately, and the client for every system. A process that restarted during the scenario (failover, backlog) has no figure. The JSON report (` + "`--json`" + `) carries the same: ` + "`cpu`" + ` with ` + "`parts`" + ` (role ` + "`brokers`" + ` / ` + "`proxy`" + `) and ` + "`client_cpu`" + `.
- **Profiles and fsyncs** — in Sundial's throughput, burst and precision runs the driver also takes CPU profiles of every broker and of the proxy at once over the scenario's measured window (publish, drain from the first delivery, steady state), as back-to-back 1 s ` + "`/debug/pprof/profile`" + ` requests at pprof's default 100 Hz (about 1% more CPU), files each sample under a cost category (` + "`loadtest/internal/bench/classify.go`" + `), and reads every broker's ` + "`" + FsyncsMetric + "`" + ` (and the ` + "`" + FsyncSecondsMetric + "`" + ` histogram) from ` + "`/metrics`" + ` at the window's two ends. A fetch that fails leaves its row – and a warning, never fails the scenario; a broker without the metric gives –. The JSON report carries each run's ` + "`profile`" + `: the window, per-process and per-role CPU seconds by category, and ` + "`fsync`" + `. ` + "`--profile-dir DIR`" + ` keeps the raw profiles as ` + "`<scenario>-<system>-<process>.pprof`" + `.
`
