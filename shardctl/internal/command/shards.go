package command

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

func shardsCommands(plain func(func(context.Context, *cli.Context, *env) error) cli.ActionFunc, leaf func(*cli.Command) *cli.Command) []*cli.Command {
	return []*cli.Command{
		leaf(&cli.Command{
			Name:      "add",
			Usage:     "add N event shards (1..256); partitions whose shard changes hand over without copying",
			ArgsUsage: "N",
			Action:    plain(runShardsAdd),
		}),
		leaf(&cli.Command{
			Name:   "list",
			Usage:  "list the event shards with their replicas, leader and state",
			Action: plain(runShardsList),
		}),
	}
}

// shardsView is the answer of shards add and shards list.
type shardsView struct {
	Shards    []shardStateView `json:"shards" yaml:"shards"`
	Handovers []handoverView   `json:"handovers,omitempty" yaml:"handovers,omitempty"`
}

type shardStateView struct {
	ShardID      uint64   `json:"shard_id" yaml:"shard_id"`
	Replicas     []uint64 `json:"replica_node_ids" yaml:"replica_node_ids"`
	LeaderNodeID uint64   `json:"leader_node_id" yaml:"leader_node_id"`
	State        string   `json:"state" yaml:"state"` // starting or serving
}

// handoverView is one open partition hand-over.
type handoverView struct {
	Topic     string `json:"topic" yaml:"topic"`
	Partition uint32 `json:"partition" yaml:"partition"`
	FromShard uint64 `json:"from_shard" yaml:"from_shard"`
	ToShard   uint64 `json:"to_shard" yaml:"to_shard"`
	// Phase is open (keys stay on from_shard) or sealed (from_shard only
	// delivers what it holds).
	Phase    string    `json:"phase" yaml:"phase"`
	OpenedAt time.Time `json:"opened_at" yaml:"opened_at"`
}

func newShardsView(shards []*sundialv1.Shard, hs []*sundialv1.Handover) shardsView {
	v := shardsView{Shards: []shardStateView{}, Handovers: newHandoverViews(hs)}
	for _, s := range shards {
		sv := shardStateView{ShardID: s.GetShardId(), LeaderNodeID: s.GetLeaderNodeId(), Replicas: []uint64{}, State: "serving"}
		if s.GetStarting() {
			sv.State = "starting"
		}
		for _, r := range s.GetReplicas() {
			sv.Replicas = append(sv.Replicas, r.GetNodeId())
		}
		v.Shards = append(v.Shards, sv)
	}
	return v
}

func newHandoverViews(hs []*sundialv1.Handover) []handoverView {
	var out []handoverView
	for _, h := range hs {
		phase := "open"
		if h.GetSealedAtUnixMs() != 0 {
			phase = "sealed"
		}
		out = append(out, handoverView{
			Topic: h.GetTopic(), Partition: h.GetPartition(), FromShard: h.GetFromShard(), ToShard: h.GetToShard(),
			Phase: phase, OpenedAt: time.UnixMilli(h.GetOpenedAtUnixMs()).UTC(),
		})
	}
	return out
}

// renderHandovers prints the hand-over table, or nothing when none is open.
func renderHandovers(w io.Writer, hs []handoverView) {
	if len(hs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d partition hand-overs open\n", len(hs))
	t := newTable(w, "TOPIC", "PARTITION", "FROM SHARD", "TO SHARD", "PHASE", "OPENED")
	for _, h := range hs {
		t.AppendRow([]any{h.Topic, h.Partition, h.FromShard, h.ToShard, h.Phase, h.OpenedAt.Format(time.RFC3339)})
	}
	t.Render()
}

func renderShards(w io.Writer, format string, v shardsView) error {
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "SHARD", "REPLICAS (NODES)", "LEADER", "STATE")
		for _, s := range v.Shards {
			ids := make([]string, len(s.Replicas))
			for i, id := range s.Replicas {
				ids[i] = fmt.Sprint(id)
			}
			t.AppendRow([]any{s.ShardID, strings.Join(ids, ","), nodeOrDash(s.LeaderNodeID), s.State})
		}
		t.Render()
		renderHandovers(w, v.Handovers)
	})
}

// addShardsTimeout is the least time shards add waits: the broker answers
// once the new shards serve, within 30 s.
const addShardsTimeout = 40 * time.Second

func runShardsAdd(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("shards add takes one argument, the number of shards to add (1..%d)", validate.MaxAddShards)
	}
	n, err := strconv.Atoi(c.Args().First())
	if err != nil || n < 1 || n > validate.MaxAddShards {
		return usagef("shards add %q: want a whole number of shards from 1 to %d", c.Args().First(), validate.MaxAddShards)
	}
	e.timeout = max(e.timeout, addShardsTimeout)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().AddShards(ctx, &sundialv1.AddShardsRequest{Count: int32(n)})
		if err != nil {
			return &opError{op: fmt.Sprintf("shards add %d", n), err: err}
		}
		return renderShards(e.stdout, e.output, newShardsView(resp.GetShards(), resp.GetHandovers()))
	})
}

func runShardsList(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("shards list takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		shards, err := cl.Cluster().ListShards(ctx, &sundialv1.ListShardsRequest{})
		if err != nil {
			return &opError{op: "shards list", err: err}
		}
		info, err := cl.Admin().GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return &opError{op: "shards list", err: err}
		}
		return renderShards(e.stdout, e.output, newShardsView(shards.GetShards(), info.GetHandovers()))
	})
}
