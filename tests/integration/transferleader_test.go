package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// clusterClient dials addr's Cluster service.
func clusterClient(t *testing.T, addr string) sundialv1.ClusterClient {
	t.Helper()
	return grpcClient(t, addr, sundialv1.NewClusterClient)
}

// Cluster.TransferLeader through the proxy moves a shard's leadership to
// the node asked for, or away from the current leader when no node is
// named; a broker that does not lead answers NotLeader naming the leader;
// bad requests get typed errors naming the field.
func TestTransferLeaderRPC(t *testing.T) {
	c := New(t, Config{Shards: 1})
	const shard = meta.FirstEventShard
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	call := func(req *sundialv1.TransferLeaderRequest) (*sundialv1.TransferLeaderResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.TransferLeader(ctx, req)
	}

	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			req       *sundialv1.TransferLeaderRequest
			code      codes.Code
			field     string
			mentioned string
		}{
			{"no shard", &sundialv1.TransferLeaderRequest{}, codes.InvalidArgument, "shard_id", "required"},
			{"unknown shard", &sundialv1.TransferLeaderRequest{ShardId: 99}, codes.NotFound, "", "shard 99"},
			{"node without replica", &sundialv1.TransferLeaderRequest{ShardId: shard, ToNodeId: 9}, codes.FailedPrecondition, "to_node_id", "node 9"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := call(tc.req)
				if got := status.Code(err); got != tc.code {
					t.Fatalf("TransferLeader(%v) code = %v (%v), want %v", tc.req, got, err, tc.code)
				}
				if !strings.Contains(status.Convert(err).Message(), tc.mentioned) {
					t.Errorf("TransferLeader(%v) message = %q, want it to mention %q", tc.req, status.Convert(err).Message(), tc.mentioned)
				}
				if tc.field == "" {
					return
				}
				v := apierr.Violations(err)
				if len(v) != 1 || v[0].Field != tc.field {
					t.Errorf("TransferLeader(%v) violations = %v, want one on %s", tc.req, v, tc.field)
				}
			})
		}
	})

	t.Run("to a named node", func(t *testing.T) {
		from := c.LeaderOf(shard)
		to := (from + 1) % len(c.Nodes)
		Eventually(t, 30*time.Second, func() error {
			if now := c.LeaderOf(shard); now == to {
				return nil
			}
			// Dragonboat drops a transfer to a replica that lags: ask
			// again until it moves.
			resp, err := call(&sundialv1.TransferLeaderRequest{ShardId: shard, ToNodeId: uint64(to + 1)})
			if err != nil {
				return err
			}
			if resp.ToNodeId != uint64(to+1) || resp.ShardId != shard {
				t.Fatalf("TransferLeader() = %v, want shard %d to node %d", resp, shard, to+1)
			}
			return fmt.Errorf("shard %d still led by node %d, want %d", shard, resp.FromNodeId, to+1)
		})
		// Asking for the node that already leads is a no-op answered as such.
		resp, err := call(&sundialv1.TransferLeaderRequest{ShardId: shard, ToNodeId: uint64(to + 1)})
		if err != nil || resp.FromNodeId != uint64(to+1) || resp.ToNodeId != uint64(to+1) {
			t.Fatalf("TransferLeader(to the leader) = %v, %v, want from = to = %d", resp, err, to+1)
		}
	})

	t.Run("to any other node", func(t *testing.T) {
		from := c.LeaderOf(shard)
		Eventually(t, 30*time.Second, func() error {
			if now := c.LeaderOf(shard); now != from {
				return nil
			}
			resp, err := call(&sundialv1.TransferLeaderRequest{ShardId: shard})
			if err != nil {
				return err
			}
			if resp.ToNodeId == uint64(from+1) || resp.ToNodeId == 0 {
				t.Fatalf("TransferLeader(any) = %v, want a node other than %d", resp, from+1)
			}
			return fmt.Errorf("shard %d still led by node %d", shard, from+1)
		})
	})

	t.Run("a follower answers NotLeader", func(t *testing.T) {
		leader := c.LeaderOf(shard)
		follower := (leader + 1) % len(c.Nodes)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := clusterClient(t, c.Nodes[follower].Config.GRPCAddr).TransferLeader(ctx, &sundialv1.TransferLeaderRequest{ShardId: shard})
		nl, ok := apierr.AsNotLeader(err)
		if !ok {
			t.Fatalf("TransferLeader() on follower %d = %v, want NotLeader", follower+1, err)
		}
		if nl.LeaderNodeId != uint64(leader+1) && nl.LeaderNodeId != 0 {
			t.Errorf("NotLeader names node %d, want %d", nl.LeaderNodeId, leader+1)
		}
	})
}
