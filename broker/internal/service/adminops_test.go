package service

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/operator"
	"github.com/sundialmq/sundial/broker/internal/peer"
	"github.com/sundialmq/sundial/broker/internal/query"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// serveShard serves s's Shard service on the host's gRPC address, where
// the executor's admin steps call the shard leader.
func serveShard(t *testing.T, s *Shard) {
	t.Helper()
	lis, err := net.Listen("tcp", s.meta.Meta().Nodes[1].GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	brokerv1.RegisterShardServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// startExecutor runs the operations executor of the single node.
func startExecutor(t *testing.T, s *Shard) {
	t.Helper()
	peers := peer.New(nil)
	e := operator.New(newLocalHost(s.host), peers, 1, operator.Config{Poll: 50 * time.Millisecond}, zaptest.NewLogger(t), prometheus.NewRegistry())
	e.Start(context.Background())
	t.Cleanup(func() { e.Stop(); peers.Close() })
}

// localHost is the executor's host on a single node, whose shards are all
// local (the broker's own adapter also reaches other brokers).
type localHost struct {
	*host.MetaClient
	*host.Replicas
	moves *host.Moves
}

func newLocalHost(h *host.Host) localHost {
	return localHost{MetaClient: h.MetaClient(), Replicas: h.Replicas(), moves: h.Moves()}
}

func (h localHost) AddLearner(ctx context.Context, shard, replica uint64, raftAddr string) error {
	return h.moves.AddLearner(ctx, shard, replica, raftAddr)
}

func (h localHost) Promote(ctx context.Context, shard, replica uint64, raftAddr string) error {
	return h.moves.Promote(ctx, shard, replica, raftAddr)
}

func (h localHost) RemoveReplica(ctx context.Context, shard, replica uint64) error {
	return h.moves.RemoveReplica(ctx, shard, replica)
}

func (h localHost) TransferLeadership(ctx context.Context, shard, toNode uint64) error {
	return h.moves.TransferLeadership(ctx, shard, toNode)
}

// singleNodeWithExecutor is singleNode serving its Shard service over
// gRPC with an executor running, so admin operations complete.
func singleNodeWithExecutor(t *testing.T) (*Shard, uint64) {
	t.Helper()
	s, shard := singleNode(t)
	serveShard(t, s)
	startExecutor(t, s)
	return s, shard
}

// A delete-topic in meta refuses publishes, a create of the name and group
// changes while it runs; a DeleteTopic whose deadline passes answers
// DeadlineExceeded and leaves one operation, which the same request sent
// again (once an executor runs) waits on; the topic is then gone from the
// shard and from meta and can be created afresh.
func TestDeleteTopicRunsAsAnOperation(t *testing.T) {
	s, shard := singleNode(t)
	serveShard(t, s)
	a, ctx := s.admin, t.Context()
	if _, err := a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "doomed"}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	publish := func() error {
		_, err := s.Publish(ctx, &brokerv1.ShardPublishRequest{ShardId: shard, Messages: []*brokerv1.PartitionedMessage{{Message: &sundialv1.Message{Topic: "doomed", Payload: []byte("x"), DelayMs: time.Hour.Milliseconds()}}}})
		return err
	}
	if err := publish(); err != nil {
		t.Fatalf("Publish() error = %v", err)
	}

	// No executor yet: the operation is stored and waits. The deadline
	// only has to outlast storing it in meta (500 ms left a busy machine
	// little room for that); without an executor no deadline is enough.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := a.DeleteTopic(short, &sundialv1.DeleteTopicRequest{Name: "doomed"})
	cancel()
	if st := StatusOf(err); st.Code() != codes.DeadlineExceeded || !strings.Contains(st.Message(), "still runs") {
		t.Fatalf("DeleteTopic(no executor, 5s) = %v, want DeadlineExceeded saying the operation still runs", err)
	}
	refusals := map[string]error{"publish": publish()}
	_, refusals["create topic"] = a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "doomed"}, IfNotExists: true})
	_, refusals["create group"] = a.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "doomed", Group: "late"})
	for what, err := range refusals {
		if st := StatusOf(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "being deleted") {
			t.Errorf("%s while the topic is deleted = %v, want FailedPrecondition 'being deleted'", what, err)
		}
	}

	// GetClusterInfo shows the operation in progress.
	info, err := a.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil || len(info.GetOperations()) != 1 || info.GetOperations()[0].GetKind() != "delete-topic" || info.GetOperations()[0].GetStatus() != "pending" {
		t.Fatalf("GetClusterInfo() operations = %v, %v; want the pending delete-topic", info.GetOperations(), err)
	}

	startExecutor(t, s)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := a.DeleteTopic(wctx, &sundialv1.DeleteTopicRequest{Name: "doomed"}); err != nil {
		t.Fatalf("DeleteTopic(again, with an executor) error = %v", err)
	}
	st, err := s.meta.ReadMeta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ops []meta.Operation
	for _, id := range st.OperationIDs() {
		ops = append(ops, *st.Operations[id])
	}
	if len(ops) != 1 || ops[0].Kind != meta.OpKindDeleteTopic || ops[0].Status != meta.OperationDone || st.Topics["doomed"] != nil {
		t.Fatalf("operations %+v, topic %v: want one delete-topic, done, and the topic gone", ops, st.Topics["doomed"])
	}
	stats, err := s.Stats(ctx, &brokerv1.ShardTopicRequest{ShardId: shard, Topic: "doomed", Partitions: []uint32{0}})
	if err != nil {
		t.Fatalf("Stats() error = %v", err)
	}
	for _, g := range stats.GetStats() {
		if g.GetScheduled() != 0 || g.GetReady() != 0 {
			t.Errorf("shard stats of the deleted topic: %v, want nothing left", g)
		}
	}
	if _, err := a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "doomed"}}); err != nil {
		t.Fatalf("CreateTopic(after the delete) error = %v", err)
	}
	if err := publish(); err != nil {
		t.Fatalf("Publish(to the topic created afresh) error = %v", err)
	}
}

// CreateGroup registers the group on the shard through the executor and
// DeleteGroup removes it, each answering once its operation is done.
func TestGroupChangesRunAsOperations(t *testing.T) {
	s, shard := singleNodeWithExecutor(t)
	a := s.admin
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := a.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "orders", Group: "billing"}); err != nil {
		t.Fatalf("CreateGroup() error = %v", err)
	}
	registered := func() bool {
		ok, err := query.New(s.host.DB(), shard, 0).HasGroup("orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !registered() {
		t.Fatal("CreateGroup answered before the group was registered on the shard")
	}
	if _, err := a.DeleteGroup(ctx, &sundialv1.DeleteGroupRequest{Topic: "orders", Group: "billing"}); err != nil {
		t.Fatalf("DeleteGroup() error = %v", err)
	}
	if registered() {
		t.Fatal("DeleteGroup answered with the group still registered on the shard")
	}
	groups, err := a.ListGroups(ctx, &sundialv1.ListGroupsRequest{Topic: "orders"})
	if err != nil || len(groups.GetGroups()) != 1 {
		t.Fatalf("ListGroups() = %v, %v, want only default", groups, err)
	}
	ops, err := NewCluster(s.host, nil, nil, s.opts, zap.NewNop()).ListOperations(ctx, &sundialv1.ListOperationsRequest{})
	if err != nil || len(ops.GetOperations()) != 2 {
		t.Fatalf("ListOperations() = %v, %v, want the create-group and the delete-group", ops, err)
	}
	for i, kind := range []string{"create-group", "delete-group"} {
		op := ops.GetOperations()[i]
		if op.GetKind() != kind || op.GetTopic() != "orders" || op.GetGroup() != "billing" || op.GetStatus() != "done" ||
			len(op.GetSteps()) != 1 || op.GetSteps()[0].GetShardId() != shard {
			t.Errorf("operation %d = %v, want %s of orders/billing, done, one step on shard %d", i, op, kind, shard)
		}
	}
}
