package broker

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

// A metrics address that is taken fails the start before the NodeHost
// opens the data dir's raft and state stores, and frees the gRPC address.
func TestStartWithTheMetricsAddressTakenTouchesNoRaftState(t *testing.T) {
	addr := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := DefaultConfig()
	cfg.GRPCAddr, cfg.RaftAddr, cfg.MetricsAddr, cfg.AdminAddr, cfg.DataDir = addr(), addr(), taken.Addr().String(), "", t.TempDir()
	cfg.InitialMembers = map[uint64]Member{1: {RaftAddr: cfg.RaftAddr, GRPCAddr: cfg.GRPCAddr}}
	cfg.Shards, cfg.RTT, cfg.CacheBytes, cfg.MemTableBytes = 1, 10*time.Millisecond, 1<<20, 1<<20
	b, err := New(cfg, zaptest.NewLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if err := b.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "listen metrics") {
		t.Fatalf("Start() with metrics address %s taken = %v, want a listen metrics error", cfg.MetricsAddr, err)
	}
	for _, dir := range []string{"raft", "state"} {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, dir)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("data dir has %s/ after the failed start (stat error %v), want none", dir, err)
		}
	}
	l, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		t.Fatalf("gRPC address %s still held after the failed start: %v", cfg.GRPCAddr, err)
	}
	l.Close()
}
