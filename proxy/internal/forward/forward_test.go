package forward

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

type fixedTable struct{ t *routing.Table }

func (f fixedTable) Table() *routing.Table                        { return f.t }
func (f fixedTable) Wait(context.Context) (*routing.Table, error) { return f.t, nil }
func (f fixedTable) Changed() <-chan struct{}                     { return nil }

// TestObserve: the forwarder retries what apierr.Classify calls Retry
// (a NotLeader naming another leader at once, the rest at the next
// replica) and hands back everything else, Unknown outcomes included.
func TestObserve(t *testing.T) {
	table := routing.NewTable(&sundialv1.RoutingTable{
		Version: 1,
		Nodes:   []*sundialv1.Node{{NodeId: 1, GrpcAddr: "a:1"}, {NodeId: 2, GrpcAddr: "b:1"}},
		Shards:  []*sundialv1.Shard{{ShardId: 7, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}}}},
	}, nil)
	later, err := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(0)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		err        error
		want       Verdict
		wantLeader string
	}{
		{"not leader, names the leader", apierr.NotLeader(7, 2, "b:1"), RetryNow, "b:1"},
		{"not leader, no leader known", apierr.NotLeader(7, 0, ""), RetryLater, "b:1"},
		{"wrong shard", apierr.WrongShard(7, 1), RetryLater, "b:1"},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), RetryLater, "b:1"},
		{"aborted", status.Error(codes.Aborted, "conflict"), RetryLater, "b:1"},
		{"resource exhausted with retry info", later.Err(), RetryLater, "b:1"},
		{"message over the size limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), Fail, "a:1"},
		{"deadline exceeded", status.Error(codes.DeadlineExceeded, "slow"), Fail, "a:1"},
		{"internal", status.Error(codes.Internal, "bug"), Fail, "a:1"},
		{"invalid argument", apierr.InvalidArgument(apierr.FieldViolation{Field: "request_id", Description: "was used for other messages"}), Fail, "a:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := New(fixedTable{table}, routing.NewPool(), nil, 0, nil)
			if got := f.Observe(7, "a:1", tc.err); got != tc.want {
				t.Errorf("Observe(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if got := f.Leader(7); got != tc.wantLeader {
				t.Errorf("Leader(7) after Observe(%v) = %q, want %q", tc.err, got, tc.wantLeader)
			}
		})
	}
}
