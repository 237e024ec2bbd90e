package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

// TestCancelRollsBackAMoveOntoAFrozenBroker: 3 brokers and a 4th that
// joined and is then frozen (SIGSTOP; suspect and dead timeouts of 10
// minutes, so plans still choose it). A rebalance moves replicas onto it;
// each move adds its learner and waits for a catch-up that cannot come
// (up to catch_up_timeout, 10 minutes). CancelOperation through the proxy
// ends each: rolled back with the cancel in its error, the learner out of
// the shard's replicas; a second cancel answers already_finished, over
// gRPC and over the HTTP API, and an unknown id is 404 there. Once thawed,
// broker 4 holds no replica.
func TestCancelRollsBackAMoveOntoAFrozenBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and injects faults")
	}
	t.Setenv("SUNDIAL_SUSPECT_NODE_TIMEOUT", "10m") // the brokers inherit them
	t.Setenv("SUNDIAL_DEAD_NODE_TIMEOUT", "10m")
	c := framework.NewCluster(t, framework.Config{Shards: 2, LogLevel: "warn"})
	joined, err := c.Join(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.ProxyAddrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl := sundialv1.NewClusterClient(conn)
	call := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return f(ctx)
	}
	if err := c.Pause(joined); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Resume(joined) })
	var moves []uint64
	framework.WaitFor(t, 60*time.Second, func() error {
		return call(func(ctx context.Context) error {
			resp, err := cl.Rebalance(ctx, &sundialv1.RebalanceRequest{})
			if err != nil {
				return err
			}
			for _, op := range resp.GetOperations() {
				if op.GetToNodeId() == uint64(joined) && op.GetKind() == "move-replica" {
					moves = append(moves, op.GetOperationId())
				}
			}
			if len(moves) == 0 {
				return fmt.Errorf("rebalance planned no move onto node %d: %v", joined, resp.GetOperations())
			}
			return nil
		})
	})
	for _, id := range moves {
		// At the catch-up: the learner is added and can never catch up.
		framework.WaitFor(t, 60*time.Second, func() error {
			return call(func(ctx context.Context) error {
				ops, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
				if err != nil {
					return err
				}
				for _, op := range ops.GetOperations() {
					if op.GetOperationId() == id {
						if op.GetStatus() != "running" || op.GetSteps()[op.GetCurrentStep()].GetKind() != "wait-catch-up" {
							return fmt.Errorf("operation %d: %s at step %d", id, op.GetStatus(), op.GetCurrentStep())
						}
						return nil
					}
				}
				return fmt.Errorf("operation %d not listed", id)
			})
		})
		var got *sundialv1.Operation
		framework.WaitFor(t, 60*time.Second, func() error {
			return call(func(ctx context.Context) error {
				resp, err := cl.CancelOperation(ctx, &sundialv1.CancelOperationRequest{OperationId: id})
				if err != nil {
					return err
				}
				if got = resp.GetOperation(); got.GetStatus() != "rolled-back" {
					return fmt.Errorf("operation %d after the cancel: %s (still rolling back)", id, got.GetStatus())
				}
				return nil
			})
		})
		if !strings.Contains(got.GetError(), "wait-catch-up: cancelled") || got.GetCancel() == "" {
			t.Fatalf("cancelled operation %d: error %q, cancel %q; want the cancel at wait-catch-up recorded", id, got.GetError(), got.GetCancel())
		}
		if err := call(func(ctx context.Context) error {
			resp, err := cl.CancelOperation(ctx, &sundialv1.CancelOperationRequest{OperationId: id})
			if err == nil && !resp.GetAlreadyFinished() {
				return fmt.Errorf("second cancel of operation %d = %v, want already_finished", id, resp)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if code, body := cancelOverHTTP(t, c, id); code != http.StatusOK || !strings.Contains(body, `"alreadyFinished":true`) {
			t.Fatalf("POST .../operations/%d:cancel = %d %s, want 200 with alreadyFinished", id, code, body)
		}
	}
	if code, body := cancelOverHTTP(t, c, 999999); code != http.StatusNotFound {
		t.Fatalf("POST .../operations/999999:cancel = %d %s, want 404", code, body)
	}
	shards, err := func() (*sundialv1.ListShardsResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cl.ListShards(ctx, &sundialv1.ListShardsRequest{})
	}()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shards.GetShards() {
		for _, r := range s.GetReplicas() {
			if r.GetNodeId() == uint64(joined) {
				t.Fatalf("shard %d keeps replica %d on node %d after its move was cancelled", s.GetShardId(), r.GetReplicaId(), joined)
			}
		}
	}
	if err := c.Resume(joined); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, 60*time.Second, func() error {
		for shard, by := range c.StateHashes() {
			if _, ok := by[joined]; ok {
				return fmt.Errorf("thawed node %d runs a replica of shard %s", joined, shard)
			}
		}
		return nil
	})
}

// cancelOverHTTP posts a cancel of operation id to the first proxy's HTTP
// API and answers the status code and body.
func cancelOverHTTP(t *testing.T, c *framework.Cluster, id uint64) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/v1/cluster/operations/%d:cancel", c.Proxies[0].HTTPAddr, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read body: %v", url, err)
	}
	return resp.StatusCode, strings.Join(strings.Fields(string(b)), "")
}
