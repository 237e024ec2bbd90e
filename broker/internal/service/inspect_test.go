package service

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// singleNode starts a one-broker host with one event shard and answers the
// Shard service over it and the shard's id once this node leads it.
func singleNode(t *testing.T) (*Shard, uint64) {
	t.Helper()
	raftAddr, grpcAddr := freeAddr(t), freeAddr(t)
	h, err := host.New(host.Config{
		NodeID: 1, RaftAddr: raftAddr, GRPCAddr: grpcAddr, DataDir: t.TempDir(),
		InitialMembers: map[uint64]host.Member{1: {RaftAddr: raftAddr, GRPCAddr: grpcAddr}},
		RTT:            10 * time.Millisecond, ElectionRTT: 20, HeartbeatRTT: 2, SnapshotEntries: 1000,
		RaftWorkers: 1, RaftLogShards: 1, CacheBytes: 1 << 20, MemTableBytes: 1 << 20,
	}, zaptest.NewLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); err != nil {
		h.Stop()
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	// The meta leader's executor creates the shard and puts it on the ring.
	shards := operator.NewShards(newLocalHost(h), 1, operator.ShardsConfig{InitialMembers: []uint64{1}, Shards: 1}, zaptest.NewLogger(t), nil)
	shards.Start(t.Context())
	t.Cleanup(shards.Stop)
	opts := Options{
		Limits: validate.DefaultLimits(), AutoCreateTopics: true, DefaultVisibilityTimeout: 30 * time.Second,
		DefaultMaxAttempts: 10, DefaultRetention: time.Hour, DefaultDedupWindow: time.Minute, Now: time.Now,
	}
	s := NewShard(h, NewAdmin(h, nil, opts), opts, zaptest.NewLogger(t), NewMetrics(prometheus.NewRegistry()))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if ids := h.Replicas().HostedShards(); len(ids) == 1 && len(h.MetaClient().Meta().RingShards()) == 1 { // led and on the ring
			if _, err := s.leading(ids[0]); err == nil {
				return s, ids[0]
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the event shard elected no leader or was not put on the ring within 60s")
	return nil, 0
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestStatsAnswersNotLeaderWhenLeadershipMovesMidRead(t *testing.T) {
	s, shard := singleNode(t)
	ctx := t.Context()
	if _, err := s.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "orders"}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	lead, err := s.leading(shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ensureGroup(ctx, lead, "orders", "default"); err != nil {
		t.Fatalf("ensureGroup() error = %v", err)
	}
	req := &brokerv1.ShardTopicRequest{ShardId: shard, Topic: "orders"}
	if resp, err := s.Stats(ctx, req); err != nil || len(resp.GetStats()) != 1 {
		t.Fatalf("Stats() while leading = %v, %v; want one group's stats", resp, err)
	}

	// Leadership moves to node 2 right after the handler's first check.
	leaderInfo := s.leaderInfo
	calls := 0
	s.leaderInfo = func(id uint64) (*host.Leading, uint64, string, bool) {
		if calls++; calls == 1 {
			return leaderInfo(id)
		}
		return nil, 2, "127.0.0.1:7502", true
	}
	_, err = s.Stats(ctx, req)
	nl, ok := apierr.AsNotLeader(err)
	if !ok || nl.GetLeaderAddr() != "127.0.0.1:7502" {
		t.Fatalf("Stats() after leadership moved = %v, want NotLeader naming 127.0.0.1:7502", err)
	}
}
