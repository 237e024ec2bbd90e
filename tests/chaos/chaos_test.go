package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proc"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/history"
	"github.com/sundialmq/sundial/tests/workload"
)

// defaultDuration is the fault time of the run inside make test.
const defaultDuration = 45 * time.Second

// TestChaos runs the workload under a seeded fault schedule, heals, drains
// and checks the history: every violation fails the test. CHAOS_DURATION
// (default 45s) and CHAOS_SEED (default: from the clock) choose the run;
// the seed is logged first. CHAOS_HISTORY names a file for the history
// (one JSON operation per line).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos runs processes under faults; skipped with -short")
	}
	duration := defaultDuration
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a positive duration like 10m", s)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an unsigned integer", s)
		}
		seed = v
	}
	const brokers, proxies = 3, 2
	faults := Schedule(seed, duration, brokers, proxies)
	t.Logf("chaos seed %d duration %v: %d faults scheduled (%s); rerun with CHAOS_SEED=%d CHAOS_DURATION=%v",
		seed, duration, len(faults), Count(faults), seed, duration)

	c := framework.NewCluster(t, framework.Config{Brokers: brokers, Proxies: proxies, Shards: 4, LogLevel: "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), duration+10*time.Minute)
	defer cancel()
	w, err := workload.New(ctx, workload.Config{Seed: seed, Duration: duration, Ops: int(duration.Seconds()) * 40}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)

	applied := make(chan []Fault, 1)
	go func() { applied <- inject(ctx, t, c, faults) }()
	w.Run(ctx)
	done := <-applied

	heal(t, c, brokers, proxies)
	if pending := w.Drain(90 * time.Second); len(pending) > 0 {
		t.Logf("drain ended with %d deliveries outstanding", len(pending))
	}
	ops := w.Recorder().Ops()
	res := checker.Check(w.CheckerConfig(), ops)
	// G7: once the load stopped, every shard's replicas hash equal.
	if err := proc.Poll(60*time.Second, c.ReplicasAgree); err != nil {
		res.Violations = append(res.Violations, checker.Violation{Property: "G7", Detail: err.Error()})
	}
	t.Logf("chaos seed %d: faults injected %d (%s); %s", seed, len(done), Count(done), res.Summary())
	t.Logf("unknown answers:%s", workload.UnknownCauses(ops))
	if len(res.Violations) > 0 {
		path := os.Getenv("CHAOS_HISTORY")
		if path == "" {
			path = filepath.Join(t.TempDir(), "history.jsonl")
		}
		if err := writeHistory(path, ops); err != nil {
			t.Logf("write history: %v", err)
		}
		t.Errorf("chaos seed %d: %d violations (history in %s):\n%s", seed, len(res.Violations), path, res)
	}
}

// inject applies faults at their offsets until the schedule or ctx ends,
// and returns the faults applied.
func inject(ctx context.Context, t *testing.T, c *framework.Cluster, faults []Fault) []Fault {
	start := time.Now()
	var done []Fault
	for _, f := range faults {
		select {
		case <-ctx.Done():
			return done
		case <-time.After(time.Until(start.Add(f.At))):
		}
		t.Logf("fault %v", f)
		if err := apply(ctx, c, f); err != nil {
			t.Errorf("fault %v: %v", f, err)
			return done
		}
		done = append(done, f)
	}
	return done
}

// apply injects f, holds it, and undoes it.
func apply(ctx context.Context, c *framework.Cluster, f Fault) error {
	hold := func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.Hold):
		}
	}
	switch f.Kind {
	case Kill:
		if err := c.Kill(f.Broker); err != nil {
			return err
		}
		hold()
		return c.Restart(f.Broker)
	case Pause:
		if err := c.Pause(f.Broker); err != nil {
			return err
		}
		hold()
		return c.Resume(f.Broker)
	case Isolate:
		c.Isolate(f.Broker)
	case Partition:
		c.Partition(f.Broker, f.Peer)
	case Slow:
		c.Slow(f.Broker, f.Latency)
	case CutGRPC:
		c.CutGRPC(f.Broker)
	case KillProxy:
		if err := c.KillProxy(f.Proxy); err != nil {
			return err
		}
		hold()
		return c.RestartProxy(f.Proxy)
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	hold()
	c.Heal()
	return nil
}

// heal removes every fault, restarts brokers that are down and waits for
// the cluster to serve again.
func heal(t *testing.T, c *framework.Cluster, brokers, proxies int) {
	c.Heal()
	for i := 1; i <= proxies; i++ {
		if !c.ProxyRunning(i) {
			if err := c.RestartProxy(i); err != nil {
				t.Errorf("restart proxy-%d: %v", i, err)
			}
		}
	}
	for id := 1; id <= brokers; id++ {
		if !c.Running(id) {
			if err := c.Restart(id); err != nil {
				t.Errorf("restart broker-%d: %v", id, err)
			}
		}
	}
	if err := c.WaitReady(2 * time.Minute); err != nil {
		t.Errorf("cluster not ready after healing: %v", err)
	}
}

func writeHistory(path string, ops []history.Op) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := history.WriteJSON(f, ops); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
