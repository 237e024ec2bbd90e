package host

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"go.uber.org/zap"
)

// noop is the cheapest state machine Dragonboat can drive: it counts.
type noop struct{ n uint64 }

func (s *noop) Update(e sm.Entry) (sm.Result, error) { s.n++; return sm.Result{Value: s.n}, nil }
func (s *noop) Lookup(any) (any, error)              { return s.n, nil }
func (s *noop) SaveSnapshot(io.Writer, sm.ISnapshotFileCollection, <-chan struct{}) error {
	return nil
}
func (s *noop) RecoverFromSnapshot(io.Reader, []sm.SnapshotFile, <-chan struct{}) error {
	return nil
}
func (s *noop) Close() error { return nil }

// BenchmarkRaftCeiling is the ceiling Raft replication alone puts on any
// design with three fsynced replicas on this machine: 3 NodeHosts with the
// broker's Dragonboat settings, 8 shards, a state machine that does
// nothing, and 8 proposers each proposing 100 messages of 130 bytes (a
// 100-byte payload and its framing) at a time. Sundial's publish path pays
// this plus its state machine and the gRPC hops; run it side by side with
// BenchmarkApplyLifecycle and tests/integration's BenchmarkPublish. With 64
// proposers it shows how far more concurrency than the loadtest's 8
// producers would take it.
func BenchmarkRaftCeiling(b *testing.B) {
	installRaftLogger(zap.NewNop())
	const (
		nodes  = 3
		shards = 8
		batch  = 100
	)
	members := map[uint64]dragonboat.Target{}
	for i := uint64(1); i <= nodes; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		members[i] = l.Addr().String()
		l.Close()
	}
	dir := b.TempDir()
	var hosts []*dragonboat.NodeHost
	for i := uint64(1); i <= nodes; i++ {
		cfg := Config{DataDir: filepath.Join(dir, fmt.Sprint(i)), RaftAddr: members[i], RTT: 20 * time.Millisecond, RaftWorkers: 2, RaftLogShards: 1}
		nh, err := dragonboat.NewNodeHost(nodeHostConfig(cfg, nil))
		if err != nil {
			b.Fatalf("NewNodeHost() error = %v", err)
		}
		b.Cleanup(nh.Close)
		hosts = append(hosts, nh)
		for s := uint64(1); s <= shards; s++ {
			rc := config.Config{ShardID: s, ReplicaID: i, ElectionRTT: 15, HeartbeatRTT: 2, CheckQuorum: true, PreVote: true}
			if err := nh.StartReplica(members, false, func(uint64, uint64) sm.IStateMachine { return &noop{} }, rc); err != nil {
				b.Fatalf("StartReplica() error = %v", err)
			}
		}
	}
	// Propose through whichever host leads each shard.
	leader := make([]*dragonboat.NodeHost, shards+1)
	deadline := time.Now().Add(30 * time.Second)
	for s := uint64(1); s <= shards; s++ {
		for leader[s] == nil {
			for i, nh := range hosts {
				if id, _, ok, _ := nh.GetLeaderID(s); ok && id == uint64(i+1) {
					leader[s] = nh
				}
			}
			if leader[s] == nil {
				if time.Now().After(deadline) {
					b.Fatalf("shard %d has no leader", s)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	for _, proposers := range []int{8, 64} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			proposeAll(b, leader, proposers, batch)
		})
	}
}

// proposeAll makes b.N proposals of batch messages from proposers
// goroutines, round-robin over the shards' leaders.
func proposeAll(b *testing.B, leader []*dragonboat.NodeHost, proposers, batch int) {
	shards := uint64(len(leader) - 1)
	cmd := make([]byte, batch*130)
	var seq atomic.Uint64
	var failed atomic.Int64
	b.SetBytes(int64(len(cmd)))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(b.N))
	for range proposers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				s := seq.Add(1)%shards + 1
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := leader[s].SyncPropose(ctx, leader[s].GetNoOPSession(s), cmd)
				cancel()
				if err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d proposals failed", n)
	}
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "msgs/s")
}
