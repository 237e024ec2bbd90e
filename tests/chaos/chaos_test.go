package chaos

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/proc"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/framework"
	"github.com/sundialmq/sundial/tests/workload"
)

// defaultDuration is the fault time of the run inside make test.
const defaultDuration = 45 * time.Second

// TestChaos runs the workload under a seeded fault schedule, heals, drains
// and checks the history: every violation fails the test. CHAOS_DURATION
// (default 45s) and CHAOS_SEED (default: from the clock) choose the run;
// the seed is logged first. CHAOS_HISTORY names a file for the history
// (one JSON operation per line). CHAOS_KILL_DURING_MOVES=0 keeps kills off
// running cluster operations (killsOverlapMoves). The cluster runs with
// TLS on every internal hop (proxy → broker, broker → broker, the Raft
// transport's mutual TLS), certificates from one test CA; CHAOS_TLS=0 runs
// it in plaintext.
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
	// Three brokers bootstrap the cluster (the meta voters); two more
	// join and hold nothing until a rebalance gives them replicas.
	const initial, joined, proxies, rf = 3, 2, 2, 3
	faults := Schedule(seed, duration, initial+joined, proxies)
	t.Logf("chaos seed %d duration %v: %d faults scheduled (%s); rerun with CHAOS_SEED=%d CHAOS_DURATION=%v",
		seed, duration, len(faults), Count(faults), seed, duration)

	cfgPath := filepath.Join(t.TempDir(), "operations.yaml")
	if err := os.WriteFile(cfgPath, []byte(operationsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	brokerArgs, proxyArgs, caFile := []string{"--config", cfgPath}, []string(nil), ""
	withTLS := false
	switch os.Getenv("CHAOS_TLS") {
	case "", "1":
		withTLS = true
		ca := tlstest.NewCA(t, "chaos")
		brokers := ca.Intermediate("chaos brokers") // the Raft transport's only trust
		brokerArgs = append(brokerArgs, tlsArgs("--tls", brokers.Broker(t.TempDir(), "broker"))...)
		brokerArgs = append(brokerArgs, "--tls-raft-ca-file", brokers.SignerFile)
		proxyArgs = tlsArgs("--cluster", ca.Proxy(t.TempDir(), "proxy"))
		caFile = ca.CAFile // the brokers' metrics ports serve HTTPS
		t.Log("internal hops use TLS (CHAOS_TLS=0 for plaintext)")
	case "0":
	default:
		t.Fatalf("CHAOS_TLS=%q: want 1 (the default) or 0", os.Getenv("CHAOS_TLS"))
	}
	adminToken := ""
	switch os.Getenv("CHAOS_AUTH") {
	case "", "1":
		adminToken = secret(t)
		path := filepath.Join(t.TempDir(), "admin.token")
		if err := os.WriteFile(path, []byte(adminToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		proxyArgs = append(proxyArgs, "--auth", "--bootstrap-token-file", path)
		t.Log("proxies authenticate every call; the workload's token has a role on its topic only (CHAOS_AUTH=0 for none)")
	case "0":
	default:
		t.Fatalf("CHAOS_AUTH=%q: want 1 (the default) or 0", os.Getenv("CHAOS_AUTH"))
	}
	c := framework.NewCluster(t, framework.Config{Brokers: initial, Proxies: proxies, Shards: 4, LogLevel: "warn",
		BrokerArgs: brokerArgs, ProxyArgs: proxyArgs, BrokerCAFile: caFile, ProxyToken: adminToken})
	workloadToken := ""
	if adminToken != "" {
		workloadToken = roleToken(t, c, "chaos*")
	}
	if withTLS {
		// With TLS a broker joins only with a join token: one for the
		// joins before the workload and every drain's replacement.
		c.SetJoinArgs("--join-token-file", joinToken(t, c, duration+time.Hour))
	}
	for range joined {
		if _, err := c.Join(2 * time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+15*time.Minute)
	defer cancel()
	// Eight partitions, so a shards add hands some over.
	// The brokers keep their default dedup window: the workload re-sends a
	// request only within it, and the checker knows it (a run longer than
	// the window would otherwise "find" ids answered anew, as documented).
	w, err := workload.New(ctx, workload.Config{Seed: seed, Duration: duration, Partitions: 8, Ops: int(duration.Seconds()) * 40,
		DedupWindow: broker.DefaultConfig().DedupWindow, Token: workloadToken}, c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)

	removed := &removedSet{}
	applied := make(chan []Fault, 1)
	go func() { applied <- inject(ctx, t, c, removed, faults) }()
	// Backups run under the faults too: the change journal is shard state
	// (G7 below covers it) and every backup must end done and readable,
	// or failed without a manifest.
	backupDest := "file://" + t.TempDir()
	bctx, stopBackups := context.WithTimeout(ctx, duration)
	backups := make(chan []string, 1)
	go func() { backups <- takeBackups(bctx, c, backupDest, t.Logf) }()
	w.Run(ctx)
	done := <-applied
	stopBackups()
	backupIDs := <-backups

	heal(t, c, removed, proxies)
	if pending := w.Drain(90 * time.Second); len(pending) > 0 {
		t.Logf("drain ended with %d deliveries outstanding", len(pending))
	}
	ops := w.Recorder().Ops()
	res := checker.Check(w.CheckerConfig(), ops)
	// Every cluster operation ended (done, failed or rolled back: none
	// left half-done), and every shard is back at its replication factor.
	ends, unfinished, err := quiesce(c, 3*time.Minute)
	if err != nil {
		res.Violations = append(res.Violations, checker.Violation{Property: "operations", Detail: fmt.Sprintf("%v: %s", err, describe(unfinished))})
	}
	t.Logf("cluster operations: %s", ends)
	if failed := failedOps(c); failed != "" {
		t.Logf("operations that failed or rolled back: %s", failed)
	}
	if err := proc.Poll(60*time.Second, func() error { return replicationFactor(c, removed, rf) }); err != nil {
		res.Violations = append(res.Violations, checker.Violation{Property: "replication", Detail: err.Error()})
	}
	if summary, err := checkBackups(c, backupDest, backupIDs); err != nil {
		res.Violations = append(res.Violations, checker.Violation{Property: "backups", Detail: err.Error()})
	} else {
		t.Logf("backups: %s", summary)
	}
	// G7: once the load stopped, every shard's replicas hash equal.
	if err := proc.Poll(60*time.Second, c.ReplicasAgree); err != nil {
		res.Violations = append(res.Violations, checker.Violation{Property: "G7", Detail: err.Error()})
	}
	t.Logf("chaos seed %d: faults injected %d (%s); %s", seed, len(done), Count(done), res.Summary())
	t.Logf("unknown answers:%s", workload.UnknownCauses(ops))
	if len(res.Violations) > 0 {
		// make chaos names data/chaos/history-<seed>.jsonl; else a kept dir.
		path := os.Getenv("CHAOS_HISTORY")
		if path == "" {
			path = framework.KeepHistory(t, ops)
		} else if err := framework.WriteHistory(path, ops); err != nil {
			path = "not kept: " + err.Error()
		}
		t.Errorf("chaos seed %d: %d violations (history in %s):\n%s", seed, len(res.Violations), path, res)
	}
}

// inject applies faults at their offsets until the schedule or ctx ends,
// and returns the faults applied.
func inject(ctx context.Context, t *testing.T, c *framework.Cluster, removed *removedSet, faults []Fault) []Fault {
	start := time.Now()
	var done []Fault
	for _, f := range faults {
		select {
		case <-ctx.Done():
			return done
		case <-time.After(time.Until(start.Add(f.At))):
		}
		t.Logf("fault %v", f)
		if err := apply(ctx, c, removed, f, t.Logf); err != nil {
			t.Errorf("fault %v: %v", f, err)
			return done
		}
		done = append(done, f)
	}
	return done
}

// apply injects f, holds it, and undoes it (an operation fault is not
// undone: it runs on under the faults that follow).
func apply(ctx context.Context, c *framework.Cluster, removed *removedSet, f Fault, logf func(string, ...any)) (ferr error) {
	hold := func() {
		select {
		case <-ctx.Done():
		case <-time.After(f.Hold):
		}
	}
	switch f.Kind {
	case Kill:
		if !killsOverlapMoves() {
			movesEnded(ctx, c, logf)
		}
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
	case TransferLeader:
		return churn(ctx, c, f, logf)
	case Rebalance:
		if err := rebalance(ctx, c, logf); err != nil {
			return err
		}
		if f.CancelAfter != 0 {
			cancelled := make(chan error, 1)
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(f.CancelAfter):
				}
				cancelled <- cancelOne(ctx, c, logf)
			}()
			defer func() {
				if err := <-cancelled; err != nil && ferr == nil {
					ferr = err
				}
			}()
		}
		if f.Broker == 0 || !killsOverlapMoves() {
			if f.Broker != 0 {
				logf("rebalance: broker-%d not killed (CHAOS_KILL_DURING_MOVES=0)", f.Broker)
			}
			hold()
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(f.KillAfter):
		}
		if err := c.Kill(f.Broker); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(f.Hold - f.KillAfter):
		}
		return c.Restart(f.Broker)
	case AddShards:
		if err := addShards(ctx, c, f, logf); err != nil {
			return err
		}
		hold()
		return nil
	case Drain:
		return drain(ctx, c, removed, f, logf)
	default:
		return fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	hold()
	c.Heal()
	return nil
}

// churn asks for a leadership transfer every f.Every for f.Hold: the i-th
// request moves the i-th shard (in id order, round the ring) to its
// (f.Broker+i)-th replica (round the shard's replicas in node id order, as
// the cluster view showed them when the churn began; the current leader is
// a no-op). Answers of a busy cluster (no leader yet, a broker catching
// up, a replica a move took away since) are counted and the churn goes on;
// a request the API calls malformed or does not know is an error of the
// harness.
func churn(ctx context.Context, c *framework.Cluster, f Fault, logf func(string, ...any)) error {
	type shard struct {
		id    uint64
		nodes []int
	}
	var shards []shard
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := proc.WaitFor(wctx, 100*time.Millisecond, func(ctx context.Context) error {
		info, err := c.ClusterInfoContext(ctx)
		if err != nil {
			return err
		}
		shards = shards[:0]
		for _, s := range info.GetShards() {
			var nodes []int
			for _, r := range s.GetReplicas() {
				nodes = append(nodes, int(r.GetNodeId()))
			}
			if len(nodes) > 0 {
				slices.Sort(nodes)
				shards = append(shards, shard{s.GetShardId(), nodes})
			}
		}
		if len(shards) == 0 {
			return fmt.Errorf("no shards with replicas in the cluster view")
		}
		slices.SortFunc(shards, func(a, b shard) int { return cmp.Compare(a.id, b.id) })
		return nil
	}); err != nil {
		// No cluster view for 10 s (the faults before this one, or a
		// loaded machine): the churn asks nothing, as an operator could not.
		logf("transfer-leader: no cluster view in 10s, nothing asked (%v)", err)
		return nil
	}
	var asked, moved, refused int
	var last error
	end := time.Now().Add(f.Hold)
	for i := 0; time.Now().Before(end); i++ {
		s := shards[i%len(shards)]
		shard, to := s.id, s.nodes[(f.Broker+i)%len(s.nodes)]
		from, target, err := c.TransferLeader(ctx, shard, to)
		asked++
		switch code := status.Code(err); {
		case err == nil:
			if from != target {
				moved++
			}
		case code == codes.InvalidArgument || code == codes.Unimplemented:
			return fmt.Errorf("TransferLeader(shard %d, broker-%d): %w", shard, to, err)
		default:
			refused++
			last = err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.Every):
		}
	}
	logf("transfer-leader: %d asked, %d moves requested, %d refused (last: %v)", asked, moved, refused, last)
	return nil
}

// heal removes every fault, restarts brokers that are down (but those a
// drain removed) and waits for the cluster to serve again.
func heal(t *testing.T, c *framework.Cluster, removed *removedSet, proxies int) {
	c.Heal()
	for i := 1; i <= proxies; i++ {
		if !c.ProxyRunning(i) {
			if err := c.RestartProxy(i); err != nil {
				t.Errorf("restart proxy-%d: %v", i, err)
			}
		}
	}
	for _, b := range c.Brokers {
		if id := b.ID; !removed.has(id) && !c.Running(id) {
			if err := c.Restart(id); err != nil {
				t.Errorf("restart broker-%d: %v", id, err)
			}
		}
	}
	if err := c.WaitReady(2 * time.Minute); err != nil {
		t.Errorf("cluster not ready after healing: %v", err)
	}
}

// joinToken creates a join token of many uses, valid for ttl, through a
// proxy (as shardctl join-token create does), and answers the file that
// holds its secret.
func joinToken(t *testing.T, c *framework.Cluster, ttl time.Duration) string {
	var secret string
	err := c.OnCluster(t.Context(), func(ctx context.Context, cl sundialv1.ClusterClient) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := cl.CreateJoinToken(ctx, &sundialv1.CreateJoinTokenRequest{ExpiresInMs: ttl.Milliseconds(), Uses: 1000})
		secret = resp.GetSecret()
		return err
	})
	if err != nil {
		t.Fatalf("CreateJoinToken: %v", err)
	}
	path := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// secret is a random token secret.
func secret(t *testing.T) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// roleToken makes a role with publish, consume, inspect and manage on
// pattern and a token of it, with the framework's admin token, and
// answers the token's secret. The bootstrap token is stored by the first
// proxy to start, so the first calls may be refused: they are retried.
func roleToken(t *testing.T, c *framework.Cluster, pattern string) string {
	conn, err := c.DialProxy(c.ProxyAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	auth := sundialv1.NewAuthClient(conn)
	var grants []*sundialv1.Grant
	for _, p := range []string{"publish", "consume", "inspect", "manage"} {
		grants = append(grants, &sundialv1.Grant{Permission: p, Pattern: pattern})
	}
	var tok string
	try := 0
	err = proc.Poll(60*time.Second, func() error {
		try++ // a token whose answer was lost exists: the next try names another
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := auth.CreateRole(ctx, &sundialv1.CreateRoleRequest{Name: "workload", Grants: grants}); err != nil && status.Code(err) != codes.AlreadyExists {
			return err
		}
		resp, err := auth.CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: fmt.Sprintf("workload-%d", try), Role: "workload"})
		tok = resp.GetSecret()
		return err
	})
	if err != nil {
		t.Fatalf("the workload's role and token: %v", err)
	}
	return tok
}

// tlsArgs are the flags naming f's files with prefix (--tls for a broker,
// --cluster for a proxy's dials to brokers).
func tlsArgs(prefix string, f tlsfiles.Files) []string {
	return []string{prefix + "-cert-file", f.CertFile, prefix + "-key-file", f.KeyFile, prefix + "-ca-file", f.CAFile}
}
