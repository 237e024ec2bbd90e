package target

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proc"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// tiny is the client shape of the tests: small, so each scenario takes
// seconds.
var tiny = scenario.Load{Concurrency: 2, Batch: 20, SizeBytes: 64}

// TestSundialScenarios runs every scenario at tiny sizes against a real
// local cluster started from the binaries (built with go build).
func TestSundialScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	spec, err := Lookup("sundial")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := spec.Start(ctx, Options{Dir: t.TempDir(), SundialBinDir: t.TempDir(), Shards: 4})
	if err != nil {
		t.Fatalf("start sundial: %v", err)
	}
	defer func() {
		if err := inst.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	}()
	t.Run("throughput", func(t *testing.T) {
		r, err := scenario.Throughput(ctx, inst, scenario.ThroughputConfig{Load: tiny, Duration: time.Second})
		if err != nil || r.Published == 0 {
			t.Fatalf("Throughput() = %d published, %v, want > 0, nil", r.Published, err)
		}
	})
	t.Run("burst", func(t *testing.T) {
		r, err := scenario.Burst(ctx, inst, scenario.BurstConfig{Load: tiny, Messages: 500, MaxFill: 2 * time.Second, Probe: 300 * time.Millisecond, DrainTimeout: 20 * time.Second})
		if err != nil || r.Delivered != r.Published || r.Early != 0 {
			t.Fatalf("Burst() = %d/%d delivered, %d early, %v, want all, 0, nil", r.Delivered, r.Published, r.Early, err)
		}
	})
	t.Run("precision", func(t *testing.T) {
		r, err := scenario.Precision(ctx, inst, scenario.PrecisionConfig{Load: tiny, Rate: 100, Delay: 500 * time.Millisecond, Duration: time.Second, Grace: 10 * time.Second})
		if err != nil || r.Missing != 0 || r.Early != 0 || r.Published == 0 {
			t.Fatalf("Precision() = %d published, %d missing, %d early, %v, want > 0, 0, 0, nil", r.Published, r.Missing, r.Early, err)
		}
	})
	t.Run("backlog", func(t *testing.T) {
		r, err := scenario.Backlog(ctx, inst, scenario.BacklogConfig{Load: tiny, Messages: 1000, MaxFill: 5 * time.Second, Canaries: 5, Settle: 100 * time.Millisecond, RestartTimeout: 60 * time.Second})
		if err != nil || r.CanariesDelivered == 0 || r.MaxRSSBytes == 0 || r.DiskBytes == 0 {
			t.Fatalf("Backlog() = %d canaries, RSS %d, disk %d, %v, want > 0, > 0, > 0, nil", r.CanariesDelivered, r.MaxRSSBytes, r.DiskBytes, err)
		}
	})
	t.Run("failover", func(t *testing.T) {
		r, err := scenario.Failover(ctx, inst, scenario.FailoverConfig{Load: scenario.Load{Concurrency: 2, Batch: 5, SizeBytes: 64}, Rate: 200,
			Before: time.Second, After: 2 * time.Second, Delay: 200 * time.Millisecond, Grace: 20 * time.Second})
		if err != nil || r.Killed == "" || r.Published == 0 {
			t.Fatalf("Failover() = killed %q, %d published, %v, want a broker, > 0, nil", r.Killed, r.Published, err)
		}
		// Loss is a finding for the report, not a flaky assertion here.
		t.Logf("failover: killed %s, window %v, lost %d of %d acked", r.Killed, r.Window, r.Lost, r.Published)
	})
}

// TestPeers runs a burst and a precision scenario against each peer whose
// binary is installed; a missing binary skips that peer, saying so.
// The TLS configuration serves the same scenario over TLS on every hop:
// the SDK verifies the proxy against the cluster's CA.
func TestSundialTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	spec, err := Lookup("sundial-tls")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := spec.Start(ctx, Options{Dir: t.TempDir(), SundialBinDir: t.TempDir(), Shards: 2})
	if err != nil {
		t.Fatalf("start sundial-tls: %v", err)
	}
	defer func() {
		if err := inst.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	}()
	r, err := scenario.Burst(ctx, inst, scenario.BurstConfig{Load: tiny, Messages: 200, MaxFill: 2 * time.Second, Probe: 300 * time.Millisecond, DrainTimeout: 20 * time.Second})
	if err != nil || r.Delivered != r.Published || r.Early != 0 {
		t.Fatalf("Burst() over TLS with a token = %d/%d delivered, %d early, %v, want all, 0, nil", r.Delivered, r.Published, r.Early, err)
	}
	// Authentication is on: the same TLS client without the token is
	// refused, so the row measures tokens too.
	cl := inst.(*sundial).cl
	anon, err := client.Dial(ctx, []string{cl.ProxyAddr()}, client.WithTLSFiles(*cl.ClientTLS()))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Publish(ctx, &sundialv1.Message{Topic: "t", Payload: []byte("x")}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("publish without the token = %v, want Unauthenticated", err)
	}
}

func TestPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts peer servers")
	}
	for _, spec := range Specs {
		if spec.Binary == "" {
			continue
		}
		t.Run(spec.Name, func(t *testing.T) {
			if _, err := spec.BinaryPath(); errors.Is(err, proc.ErrNotFound) {
				t.Skipf("%s not installed, peer not tested: %v", spec.Binary, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			inst, err := spec.Start(ctx, Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatalf("start %s: %v", spec.Name, err)
			}
			defer inst.Close()
			r, err := scenario.Burst(ctx, inst, scenario.BurstConfig{Load: tiny, Messages: 200, MaxFill: time.Second, Probe: 200 * time.Millisecond, DrainTimeout: 10 * time.Second})
			if err != nil || r.Delivered != r.Published || r.Published == 0 {
				t.Fatalf("Burst(%s) = %d/%d delivered, %v, want all of > 0, nil", spec.Name, r.Delivered, r.Published, err)
			}
		})
	}
}

// TestSundialBackup runs the backup scenario at a tiny size against a real
// local cluster: both backups are taken, and the restore into a new
// cluster holds as many pending messages as the backed-up one. Sizes and
// times are figures for the report, not asserted.
func TestSundialBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and starts two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spec, err := Lookup("sundial")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	inst, err := spec.Start(ctx, Options{Dir: dir, SundialBinDir: t.TempDir(), Shards: 2})
	if err != nil {
		t.Fatalf("start sundial: %v", err)
	}
	defer func() {
		if err := inst.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	}()
	r, err := scenario.Backup(ctx, inst, scenario.BackupConfig{Load: tiny, Messages: 2000, Changes: 100, MaxFill: 30 * time.Second,
		Dest: "file://" + filepath.Join(dir, "backups"), ConsumeTimeout: 60 * time.Second})
	if err != nil || r.Full.Kind != "full" || r.Incremental.Kind != "incremental" || r.ChangesAcked != 100 || r.Restore == nil || !r.Restore.Match {
		t.Fatalf("Backup() = full %+v, incremental %+v, %d acked, restore %+v, %v; want both backups, 100 acked, a matching restore, nil",
			r.Full, r.Incremental, r.ChangesAcked, r.Restore, err)
	}
	t.Logf("backup: full %d B in %v, incremental %d B in %v (%+v), restore %+v", r.Full.Bytes, r.Full.Elapsed, r.Incremental.Bytes, r.Incremental.Elapsed, r.Judgement, *r.Restore)
}
