package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func transferLeaderCommand(act cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:  "transfer-leader",
		Usage: "move a shard's leadership to another node's replica",
		Flags: []cli.Flag{
			&cli.Uint64Flag{Name: "shard", Usage: "the shard `ID` (required; see shardctl status)"},
			&cli.Uint64Flag{Name: "to", Usage: "the `NODE` whose replica should lead (default: any other replica)"},
			&cli.BoolFlag{Name: "wait", Usage: "wait (up to --timeout) until the new leader is elected"},
		},
		Action: act,
	}
}

// transferView is the answer of transfer-leader.
type transferView struct {
	ShardID    uint64 `json:"shard_id" yaml:"shard_id"`
	FromNodeID uint64 `json:"from_node_id" yaml:"from_node_id"`
	ToNodeID   uint64 `json:"to_node_id" yaml:"to_node_id"`
	// Elected is whether the target leads now: known only under --wait.
	Elected *bool `json:"elected,omitempty" yaml:"elected,omitempty"`
}

func renderTransfer(w io.Writer, format string, v transferView) error {
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "SHARD", "FROM", "TO", "STATE")
		state := "requested"
		if v.Elected != nil && *v.Elected {
			state = "elected"
		}
		if v.FromNodeID == v.ToNodeID {
			state = "already leader"
		}
		t.AppendRow([]any{v.ShardID, nodeOrDash(v.FromNodeID), v.ToNodeID, state})
		t.Render()
	})
}

func runTransferLeader(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("transfer-leader takes no arguments, got %q", c.Args().Slice())
	}
	shard := c.Uint64("shard")
	if shard == 0 {
		return usagef("--shard is required: the id of the shard (see shardctl status)")
	}
	req := &sundialv1.TransferLeaderRequest{ShardId: shard, ToNodeId: c.Uint64("to")}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().TransferLeader(ctx, req)
		if err != nil {
			return &opError{op: fmt.Sprintf("transfer-leader --shard %d", shard), err: err}
		}
		v := transferView{ShardID: resp.GetShardId(), FromNodeID: resp.GetFromNodeId(), ToNodeID: resp.GetToNodeId()}
		if c.Bool("wait") && v.FromNodeID != v.ToNodeID {
			if err := waitLeader(ctx, cl, req, v.ToNodeID); err != nil {
				return &opError{op: fmt.Sprintf("transfer-leader --shard %d: waiting for node %d", shard, v.ToNodeID), err: err}
			}
			elected := true
			v.Elected = &elected
		}
		return renderTransfer(e.stdout, e.output, v)
	})
}

// waitInterval is how often --wait looks at the shard's leader.
const waitInterval = 200 * time.Millisecond

// waitLeader polls until node leads req's shard. Dragonboat drops a
// transfer to a replica that lags behind, so the request is sent again on
// every look that finds another leader.
func waitLeader(ctx context.Context, cl *client.Client, req *sundialv1.TransferLeaderRequest, node uint64) error {
	ask := &sundialv1.TransferLeaderRequest{ShardId: req.GetShardId(), ToNodeId: node}
	for {
		resp, err := cl.Cluster().ListShards(ctx, &sundialv1.ListShardsRequest{})
		if err != nil {
			return err
		}
		for _, s := range resp.GetShards() {
			if s.GetShardId() == req.GetShardId() && s.GetLeaderNodeId() == node {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(waitInterval):
		}
		if _, err := cl.Cluster().TransferLeader(ctx, ask); err != nil {
			return err
		}
	}
}
