package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// withTimeouts is 3 brokers and 2 shards of 3 replicas whose moves use
// the given catch-up timeout.
func withTimeouts(catchUp time.Duration) Config {
	return Config{Shards: 2, Tune: func(bc *broker.Config) {
		bc.Operations.StepTimeout = 20 * time.Second
		bc.Operations.CatchUpTimeout = catchUp
	}}
}

func shards(t *testing.T, cl sundialv1.ClusterClient) map[uint64][]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.ListShards(ctx, &sundialv1.ListShardsRequest{})
	if err != nil {
		t.Fatalf("ListShards() error = %v", err)
	}
	out := map[uint64][]uint64{}
	for _, s := range resp.GetShards() {
		for _, r := range s.GetReplicas() {
			out[s.GetShardId()] = append(out[s.GetShardId()], r.GetNodeId())
		}
		slices.Sort(out[s.GetShardId()])
	}
	return out
}

// submit proposes ops through the first running broker and answers the
// stored ids.
func submit(t *testing.T, c *Cluster, ops ...meta.Operation) []meta.OperationID {
	t.Helper()
	var ids []meta.OperationID
	Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, n := range c.Nodes {
			if n.Server == nil {
				continue
			}
			code, data, err := n.Server.ProposeMeta(ctx, &meta.Command{Op: meta.OpSubmitOperations, Operations: ops})
			if err != nil {
				return err
			}
			if code != meta.ResultOK {
				return fmt.Errorf("submit = %d", code)
			}
			return json.Unmarshal(data, &ids)
		}
		return fmt.Errorf("no broker running")
	})
	return ids
}

func timeouts(c *Cluster) meta.StepTimeouts {
	return meta.StepTimeouts{Step: c.Nodes[0].Config.Operations.StepTimeout, CatchUp: c.Nodes[0].Config.Operations.CatchUpTimeout}
}

// waitEnded polls ListOperations until every operation has ended and
// answers them by id.
func waitEnded(t *testing.T, cl sundialv1.ClusterClient, timeout time.Duration) map[uint64]*sundialv1.Operation {
	t.Helper()
	var got map[uint64]*sundialv1.Operation
	Eventually(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cl.ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		if err != nil {
			return err
		}
		got = map[uint64]*sundialv1.Operation{}
		for _, op := range resp.GetOperations() {
			got[op.GetOperationId()] = op
			if op.GetStatus() == "pending" || op.GetStatus() == "running" {
				return fmt.Errorf("operation %d %s at step %d", op.GetOperationId(), op.GetStatus(), op.GetCurrentStep())
			}
		}
		return nil
	})
	return got
}

// A replica leaves a shard and a new one joins on the same node, the two
// halves of a move (all 3 brokers hold every shard, so a move proper needs
// a 4th broker): the removed replica is stopped and its data deleted; the
// new one (a new replica id) starts with join=true, catches up from the
// leader and is promoted. Every message published before is delivered
// after, none before it is due.
func TestRebalanceReplicaLeavesAndJoins(t *testing.T) {
	c := New(t, withTimeouts(60*time.Second))
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	const topic = "moves"
	due := map[string]int64{}
	dueAt := time.Now().Add(3 * time.Second).UnixMilli()
	for i := 0; i < 60; i++ {
		r := publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(strconv.Itoa(i)), DeliverAtUnixMs: dueAt + int64(i%3)*1000})
		due[r[0].MessageId] = dueAt + int64(i%3)*1000
	}
	const shard = meta.FirstEventShard
	before := shards(t, cl)
	leader := uint64(c.LeaderOf(shard)) + 1
	// The node that leaves is neither the meta leader nor the shard's
	// leader, so the replica removed is a plain follower.
	var node uint64
	Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := c.Admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil || info.GetMetaLeaderNodeId() == 0 {
			return fmt.Errorf("meta leader not known: %w", err)
		}
		for n := uint64(1); n <= 3; n++ {
			if n != leader && n != info.GetMetaLeaderNodeId() {
				node = n
				return nil
			}
		}
		return fmt.Errorf("no node left")
	})
	ids := submit(t, c, meta.NewRemoveReplica(meta.EventShardID(shard), meta.NodeID(node), 0, false, "test", timeouts(c)))
	if op := waitEnded(t, cl, 90*time.Second)[uint64(ids[0])]; op.GetStatus() != "done" {
		t.Fatalf("remove = %v, want done", op)
	}
	if on := shards(t, cl)[shard]; slices.Contains(on, node) || len(on) != 2 {
		t.Fatalf("shard %d replicas after removing node %d = %v", shard, node, on)
	}
	// The broker that holds no replica any more still names the shard's
	// leader in the routing table it serves (learned from its peers), so a
	// proxy watching it routes and reports ready.
	Eventually(t, 15*time.Second, func() error {
		conn, err := grpc.NewClient(c.Nodes[node-1].Config.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := sundialv1.NewAdminClient(conn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		for _, s := range info.GetShards() {
			if s.GetShardId() == shard && s.GetLeaderNodeId() == 0 {
				return fmt.Errorf("node %d, which no longer hosts shard %d, serves it without a leader", node, shard)
			}
		}
		return nil
	})
	ids = submit(t, c, meta.NewAddReplica(meta.EventShardID(shard), meta.NodeID(node), 0, "test", timeouts(c)))
	if op := waitEnded(t, cl, 120*time.Second)[uint64(ids[0])]; op.GetStatus() != "done" {
		t.Fatalf("add = %v, want done", op)
	}
	if on := shards(t, cl)[shard]; !slices.Equal(on, before[shard]) {
		t.Fatalf("shard %d replicas after the add = %v, want nodes %v", shard, on, before[shard])
	}
	// The rejoined replica can lead: it caught up. Only the shard's
	// current leader starts a transfer (a follower answers NotLeader).
	Eventually(t, 60*time.Second, func() error {
		now := uint64(c.LeaderOf(shard)) + 1
		if now == node {
			return nil
		}
		if err := c.Nodes[now-1].Server.TransferLeadership(t.Context(), shard, node); err != nil {
			return err
		}
		return fmt.Errorf("shard %d led by node %d, want %d", shard, now, node)
	})
	c.WaitReady()

	sub := c.Subscribe(topic, "", 100, 0)
	defer sub.Close()
	want := map[string]bool{}
	for id := range due {
		want[id] = true
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(want) > 0 {
		got, ok := sub.Next(time.Until(deadline))
		if !ok {
			t.Fatalf("%d messages published before the change never delivered (stream error %v)", len(want), sub.Err())
		}
		if got.At.UnixMilli() < due[got.MessageId] {
			t.Fatalf("message %s delivered at %d, due at %d: early", got.MessageId, got.At.UnixMilli(), due[got.MessageId])
		}
		delete(want, got.MessageId)
		ack(t, c, got.Receipt)
		sub.Credit(1)
	}
}

// A move to a node no broker runs cannot catch up: after the catch-up
// timeout the executor takes the learner out and the operation ends
// rolled back; the shard keeps the replicas it had.
func TestRebalanceRollsBackMoveToStoppedBroker(t *testing.T) {
	c := New(t, withTimeouts(3*time.Second))
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	four := &meta.Node{ID: 4, RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
	Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := c.Nodes[0].Server.ProposeMeta(ctx, &meta.Command{Op: meta.OpRegisterNode, Node: four})
		return err
	})
	const shard = meta.FirstEventShard
	before := shards(t, cl)
	ids := submit(t, c, meta.NewMoveReplica(meta.EventShardID(shard), 1, 4, 0, "test", timeouts(c)))
	ops := waitEnded(t, cl, 90*time.Second)
	if op := ops[uint64(ids[0])]; op.GetStatus() != "rolled-back" || !strings.Contains(op.GetError(), "wait-catch-up") {
		t.Fatalf("move to node 4 = %v, want rolled-back at wait-catch-up", op)
	}
	if after := shards(t, cl); !slices.Equal(after[shard], before[shard]) {
		t.Fatalf("shard %d replicas after the roll back = %v, want %v", shard, after[shard], before[shard])
	}
}

// The executor changes the membership and leadership of a shard the meta
// leader holds no replica of through a broker that hosts one (Peer RPCs):
// with the meta leader's replica removed, a leadership transfer between
// the two replicas left and an add of a replica back on the meta leader's
// node are both done, and the shard has its 3 replicas again.
func TestOperationsOnShardNotOnMetaLeader(t *testing.T) {
	c := New(t, withTimeouts(60*time.Second))
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	const shard = meta.FirstEventShard
	metaLeader := clusterInfo(t, c).GetMetaLeaderNodeId()
	if leader := uint64(c.LeaderOf(shard)) + 1; leader == metaLeader {
		other := metaLeader%3 + 1
		Eventually(t, 60*time.Second, func() error {
			now := uint64(c.LeaderOf(shard)) + 1
			if now != metaLeader {
				return nil
			}
			if err := c.Nodes[now-1].Server.TransferLeadership(t.Context(), shard, other); err != nil {
				return err
			}
			return fmt.Errorf("shard %d still led by the meta leader %d", shard, now)
		})
	}
	ids := submit(t, c, meta.NewRemoveReplica(meta.EventShardID(shard), meta.NodeID(metaLeader), 0, false, "test", timeouts(c)))
	if op := waitEnded(t, cl, 90*time.Second)[uint64(ids[0])]; op.GetStatus() != "done" {
		t.Fatalf("remove = %v, want done", op)
	}
	if on := shards(t, cl)[shard]; len(on) != 2 || slices.Contains(on, metaLeader) {
		t.Fatalf("shard %d replicas = %v, want the 2 not on the meta leader %d", shard, on, metaLeader)
	}

	// The Peer RPCs the executor uses: a broker without a replica of the
	// shard answers FailedPrecondition naming the shard (the executor asks
	// the next host), a request missing fields InvalidArgument naming them.
	peer := peerClient(t, c.Nodes[metaLeader-1].Config.GRPCAddr)
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := peer.ChangeShardMembership(pctx, &brokerv1.ChangeShardMembershipRequest{ShardId: shard,
		Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_DELETE, ReplicaId: 99})
	if v := apierr.Violations(err); status.Code(err) != codes.FailedPrecondition || len(v) != 1 || v[0].Field != "shard_id" {
		t.Fatalf("ChangeShardMembership on node %d without a replica of shard %d = %v, want FailedPrecondition on shard_id", metaLeader, shard, err)
	}
	_, err = peer.TransferShardLeader(pctx, &brokerv1.TransferShardLeaderRequest{ShardId: shard, ToNodeId: 2})
	if v := apierr.Violations(err); status.Code(err) != codes.FailedPrecondition || len(v) != 1 || v[0].Field != "shard_id" {
		t.Fatalf("TransferShardLeader on node %d without a replica of shard %d = %v, want FailedPrecondition on shard_id", metaLeader, shard, err)
	}
	_, err = peer.ChangeShardMembership(pctx, &brokerv1.ChangeShardMembershipRequest{ShardId: shard,
		Change: brokerv1.MembershipChange_MEMBERSHIP_CHANGE_ADD_VOTER, ReplicaId: 99})
	if v := apierr.Violations(err); status.Code(err) != codes.InvalidArgument || len(v) != 1 || v[0].Field != "raft_addr" {
		t.Fatalf("ChangeShardMembership(add voter, no raft_addr) = %v, want InvalidArgument on raft_addr", err)
	}

	// The routing table names the leader among the replicas left once the
	// brokers' views settle.
	left := shards(t, cl)[shard]
	var from, to uint64
	Eventually(t, 20*time.Second, func() error {
		from = uint64(c.LeaderOf(shard)) + 1
		if !slices.Contains(left, from) {
			return fmt.Errorf("shard %d led by node %d, not one of its replicas %v", shard, from, left)
		}
		return nil
	})
	for _, n := range left {
		if n != from {
			to = n
		}
	}
	ids = submit(t, c, meta.NewTransferLeader(meta.EventShardID(shard), meta.NodeID(from), meta.NodeID(to), "test", timeouts(c)))
	if op := waitEnded(t, cl, 60*time.Second)[uint64(ids[0])]; op.GetStatus() != "done" {
		t.Fatalf("transfer of shard %d from node %d to %d, run by the meta leader %d which holds no replica = %v, want done",
			shard, from, to, metaLeader, op)
	}
	Eventually(t, 20*time.Second, func() error {
		if now := uint64(c.LeaderOf(shard)) + 1; now != to {
			return fmt.Errorf("shard %d led by node %d after the transfer, want %d", shard, now, to)
		}
		return nil
	})

	ids = submit(t, c, meta.NewAddReplica(meta.EventShardID(shard), meta.NodeID(metaLeader), 0, "test", timeouts(c)))
	if op := waitEnded(t, cl, 90*time.Second)[uint64(ids[0])]; op.GetStatus() != "done" {
		t.Fatalf("add of shard %d on the meta leader's node %d, which holds no replica = %v, want done", shard, metaLeader, op)
	}
	if on := shards(t, cl)[shard]; len(on) != 3 || !slices.Contains(on, metaLeader) {
		t.Fatalf("shard %d replicas = %v, want 3 with node %d", shard, on, metaLeader)
	}
}

func peerClient(t *testing.T, addr string) brokerv1.PeerClient {
	t.Helper()
	return grpcClient(t, addr, brokerv1.NewPeerClient)
}
