package forward

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

// shardTable is a table of shard 7 on nodes 1 (a:1) and 2 (b:1), led by
// leader (0: unknown).
func shardTable(version, leader uint64) *sundialv1.RoutingTable {
	return &sundialv1.RoutingTable{
		Version: version,
		Nodes:   []*sundialv1.Node{{NodeId: 1, GrpcAddr: "a:1"}, {NodeId: 2, GrpcAddr: "b:1"}},
		Shards:  []*sundialv1.Shard{{ShardId: 7, LeaderNodeId: leader, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}}}},
	}
}

// A try waiting on a leader that stopped answering (frozen, its connection
// open) is cut once a newer table names another leader of the shard, and
// the call goes to the new leader at once instead of waiting out the
// forward timeout.
func TestDoLeavesALeaderTheTableMovedOff(t *testing.T) {
	w := routing.NewWatcher(routing.WatcherConfig{}, nil, zaptest.NewLogger(t), nil, nil)
	w.Install(shardTable(1, 1))
	pool := routing.NewPool()
	t.Cleanup(pool.Close)
	f := New(w, pool, nil, time.Minute, nil)

	atFrozen := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- f.Do(context.Background(), 7, func(ctx context.Context, conn *grpc.ClientConn) error {
			if conn.Target() == "b:1" {
				return nil
			}
			atFrozen <- struct{}{}
			<-ctx.Done() // a frozen broker answers nothing
			return status.FromContextError(ctx.Err()).Err()
		})
	}()
	select {
	case <-atFrozen:
	case <-time.After(30 * time.Second):
		t.Fatal("Do() never tried the leader the table names")
	}
	w.Install(shardTable(2, 2))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Do() after the table moved the leader to b:1 = %v, want nil (answered there)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Do() still waits on the old leader 30s after the table moved the shard's leader")
	}
	if got := f.Leader(7); got != "b:1" {
		t.Errorf("Leader(7) after the move = %q, want b:1", got)
	}
}

// A write without a request id (DoUncut) is not cut when the table moves
// its shard's leader: a second try at the new leader would apply it again,
// so the try at the old leader runs on to its answer.
func TestDoUncutWaitsForTheTriedLeader(t *testing.T) {
	w := routing.NewWatcher(routing.WatcherConfig{}, nil, zaptest.NewLogger(t), nil, nil)
	w.Install(shardTable(1, 1))
	pool := routing.NewPool()
	t.Cleanup(pool.Close)
	f := New(w, pool, nil, time.Minute, nil)

	tried := make(chan context.Context, 1)
	answer := make(chan struct{})
	var atNew atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- f.DoUncut(context.Background(), 7, func(ctx context.Context, conn *grpc.ClientConn) error {
			if conn.Target() == "b:1" {
				atNew.Add(1)
				return nil
			}
			tried <- ctx
			select {
			case <-answer: // the old leader answers in the end
				return nil
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		})
	}()
	var tryCtx context.Context
	select {
	case tryCtx = <-tried:
	case <-time.After(30 * time.Second):
		t.Fatal("DoUncut() never tried the leader the table names")
	}
	w.Install(shardTable(2, 2))
	// A cut (Do) reacts to the install at once; give it ample time to.
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if tryCtx.Err() != nil {
			t.Fatalf("DoUncut()'s try at the old leader was cut (%v) when the table moved the leader; want it to run on", tryCtx.Err())
		}
	}
	close(answer)
	select {
	case err := <-done:
		if err != nil || atNew.Load() != 0 {
			t.Fatalf("DoUncut() = %v with %d tries at the new leader, want nil from the old leader's answer and none there", err, atNew.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("DoUncut() did not return after the old leader answered")
	}
}

func TestMovedOff(t *testing.T) {
	tests := []struct {
		name          string
		leader, start uint64
		addr          string
		want          bool
	}{
		{"leader moved to another broker", 2, 1, "a:1", true},
		{"leader unchanged", 1, 1, "a:1", false},
		{"leader unknown", 0, 1, "a:1", false},
		{"moved to the broker tried (learned from a redirect)", 2, 1, "b:1", false},
		{"table hint moved but the try went where it points", 1, 2, "a:1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table := routing.NewTable(shardTable(2, tc.leader), nil)
			if got := movedOff(table, 7, tc.start, tc.addr); got != tc.want {
				t.Errorf("movedOff(leader %d, start %d, %s) = %v, want %v", tc.leader, tc.start, tc.addr, got, tc.want)
			}
		})
	}
}
