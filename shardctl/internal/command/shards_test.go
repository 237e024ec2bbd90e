package command

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

var testHandovers = []*sundialv1.Handover{
	{Topic: "orders", Partition: 3, FromShard: 101, ToShard: 108, OpenedAtUnixMs: 1_700_000_000_000},
	{Topic: "orders", Partition: 5, FromShard: 102, ToShard: 109, OpenedAtUnixMs: 1_700_000_000_000, SealedAtUnixMs: 1_700_000_060_000},
}

func TestRenderShards(t *testing.T) {
	shards := []*sundialv1.Shard{
		{ShardId: 101, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{NodeId: 1}, {NodeId: 2}, {NodeId: 3}}},
		{ShardId: 108, Starting: true, Replicas: []*sundialv1.Replica{{NodeId: 2}, {NodeId: 3}, {NodeId: 4}}},
	}
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderShards(&b, format, newShardsView(shards, testHandovers)); err != nil {
				t.Fatalf("renderShards(%s) = %v, want nil", format, err)
			}
			golden(t, "shards."+format, b.String())
		})
	}
}

// fakeGrow adds shards once; a second add is refused as the meta group
// refuses one while hand-overs are open.
type fakeGrow struct {
	sundialv1.UnimplementedClusterServer
	added bool
}

func (f *fakeGrow) AddShards(_ context.Context, req *sundialv1.AddShardsRequest) (*sundialv1.AddShardsResponse, error) {
	if f.added {
		return nil, status.Error(codes.FailedPrecondition, "shards are being added already: wait until their hand-overs close (shardctl status)")
	}
	f.added = true
	resp := &sundialv1.AddShardsResponse{Handovers: testHandovers}
	for i := range req.GetCount() {
		resp.Shards = append(resp.Shards, &sundialv1.Shard{ShardId: 108 + uint64(i), LeaderNodeId: 2})
	}
	return resp, nil
}

func TestShardsAddCommand(t *testing.T) {
	addr := serveCluster(t, &fakeGrow{})
	for _, tc := range []cliCase{
		{"no count", []string{"shards", "add"}, ExitUsage, "", "takes one argument"},
		{"zero", []string{"shards", "add", "0"}, ExitUsage, "", "from 1 to 256"},
		{"too many", []string{"shards", "add", "257"}, ExitUsage, "", "from 1 to 256"},
		{"not a number", []string{"shards", "add", "x"}, ExitUsage, "", "from 1 to 256"},
		{"added", []string{"shards", "add", "2"}, ExitOK, "2 partition hand-overs open", ""},
		{"refused while growing", []string{"shards", "add", "1"}, ExitFailure, "", "being added already"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, addr) })
	}
}
