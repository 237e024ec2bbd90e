package command

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func drainNodeCommand(act cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:      "drain-node",
		Usage:     "move every replica and leadership off a node; waits until none is left unless --no-wait",
		ArgsUsage: "ID",
		Description: "The node is marked draining (it receives no replicas) and the moves off it are submitted to the\n" +
			"executor on the meta leader. While waiting, shardctl asks again every second, which submits the\n" +
			"moves of shards that were busy with other operations. Once nothing is left, remove the node with\n" +
			"shardctl remove-node ID.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "no-wait", Usage: "return once the moves are submitted"},
			&cli.DurationFlag{Name: "wait-timeout", Value: 30 * time.Minute, Usage: "give up waiting after `D`"},
		},
		Action: act,
	}
}

func removeNodeCommand(act cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:      "remove-node",
		Usage:     "remove a drained node from the cluster for good (its id is never reused)",
		ArgsUsage: "ID",
		Description: "Refused while the node holds replicas or leaderships (run shardctl drain-node ID first). A meta\n" +
			"voter is replaced by promoting a joined broker. --force removes a node that still holds replicas,\n" +
			"only when it is dead or unreachable; the healer re-creates its replicas as it does a dead node's.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "remove a dead or unreachable node that still holds replicas"},
		},
		Action: act,
	}
}

// drainView is the answer of drain-node.
type drainView struct {
	NodeID            uint64          `json:"node_id" yaml:"node_id"`
	State             string          `json:"state" yaml:"state"`
	RemainingReplicas uint32          `json:"remaining_replicas" yaml:"remaining_replicas"`
	RemainingLeaders  uint32          `json:"remaining_leaders" yaml:"remaining_leaders"`
	PendingOperations uint32          `json:"pending_operations" yaml:"pending_operations"`
	Drained           bool            `json:"drained" yaml:"drained"`
	Operations        []operationView `json:"operations" yaml:"operations"`
}

func viewDrain(id uint64, resp *sundialv1.DrainNodeResponse, ops []*sundialv1.Operation) drainView {
	v := drainView{
		NodeID: id, State: stateName(resp.GetNode().GetState()),
		RemainingReplicas: resp.GetRemainingReplicas(), RemainingLeaders: resp.GetRemainingLeaders(),
		PendingOperations: resp.GetPendingOperations(), Operations: viewOperations(ops),
	}
	v.Drained = v.RemainingReplicas == 0 && v.RemainingLeaders == 0 && v.PendingOperations == 0
	return v
}

func renderDrain(w io.Writer, format string, v drainView) error {
	return render(w, format, v, func(w io.Writer) {
		if len(v.Operations) > 0 {
			t := newTable(w, "ID", "KIND", "SHARD", "FROM", "TO", "STATUS", "STEP")
			for _, op := range v.Operations {
				t.AppendRow([]any{idOrDash(op.ID), op.Kind, op.Shard, nodeOrDash(op.From), nodeOrDash(op.To), op.Status, op.progress()})
			}
			t.Render()
		}
		if v.Drained {
			fmt.Fprintf(w, "node %d drained: it holds no replicas and leads no shard; remove it with shardctl remove-node %d\n", v.NodeID, v.NodeID)
			return
		}
		fmt.Fprintf(w, "node %d %s: %s\n", v.NodeID, v.State, remaining(v))
	})
}

// remaining says what a draining node still holds.
func remaining(v drainView) string {
	return fmt.Sprintf("%s, %s left, %s pending", count(int(v.RemainingReplicas), "replica"),
		count(int(v.RemainingLeaders), "leadership"), count(int(v.PendingOperations), "operation"))
}

func count(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func stateName(s sundialv1.NodeState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "NODE_STATE_"))
}

// nodeArg parses the one ID argument of a node command.
func nodeArg(c *cli.Context, name string) (uint64, error) {
	if c.Args().Len() != 1 {
		return 0, usagef("%s takes one argument, the node ID, got %q", name, c.Args().Slice())
	}
	id, err := strconv.ParseUint(c.Args().First(), 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("%s %q: want a node id (a positive integer, see shardctl status)", name, c.Args().First())
	}
	return id, nil
}

// refusal turns the server's refusal of a node command (unknown node, or
// a node not fit for it) into its own message, exit 1; other errors stay
// op errors.
func refusal(op string, err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		return &silentError{msg: op + ": " + status.Convert(err).Message() + " (see shardctl status)"}
	case codes.FailedPrecondition:
		var why []string
		for _, v := range apierr.Violations(err) {
			why = append(why, v.Description)
		}
		if len(why) == 0 {
			why = append(why, status.Convert(err).Message())
		}
		return &silentError{msg: op + ": " + strings.Join(why, "; ")}
	}
	return &opError{op: op, err: err}
}

func runDrainNode(ctx context.Context, c *cli.Context, e *env) error {
	id, err := nodeArg(c, "drain-node")
	if err != nil {
		return err
	}
	if c.Duration("wait-timeout") <= 0 {
		return usagef("--wait-timeout %v: want a positive duration", c.Duration("wait-timeout"))
	}
	op := fmt.Sprintf("drain-node %d", id)
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	drain := func() (*sundialv1.DrainNodeResponse, error) {
		var resp *sundialv1.DrainNodeResponse
		err := withTimeout(ctx, e.timeout, func(ctx context.Context) error {
			var err error
			resp, err = cl.Cluster().DrainNode(ctx, &sundialv1.DrainNodeRequest{NodeId: id})
			return err
		})
		return resp, err
	}
	resp, err := drain()
	if err != nil {
		return refusal(op, err)
	}
	v := viewDrain(id, resp, resp.GetOperations())
	if c.Bool("no-wait") || v.Drained {
		return renderDrain(e.stdout, e.output, v)
	}
	submitted := ids(resp.GetOperations())
	wctx, cancel := context.WithTimeout(ctx, c.Duration("wait-timeout"))
	defer cancel()
	last := ""
	for !v.Drained {
		if now := remaining(v); now != last {
			fmt.Fprintf(e.stderr, "node %d: %s\n", id, now)
			last = now
		}
		select {
		case <-wctx.Done():
			return &silentError{msg: fmt.Sprintf("%s: still %s after %v (see shardctl operations; run drain-node again to carry on)",
				op, remaining(v), c.Duration("wait-timeout"))}
		case <-time.After(progressInterval):
		}
		if resp, err = drain(); err != nil {
			return refusal(op, err)
		}
		for _, o := range resp.GetOperations() {
			submitted[o.GetOperationId()] = true
		}
		v = viewDrain(id, resp, nil)
	}
	ops, err := listOperations(ctx, cl, e, submitted)
	if err != nil {
		return &opError{op: op + ": list its operations", err: err}
	}
	v.Operations = viewOperations(ops)
	return renderDrain(e.stdout, e.output, v)
}

// listOperations answers the operations whose ids are in want.
func listOperations(ctx context.Context, cl *client.Client, e *env, want map[uint64]bool) ([]*sundialv1.Operation, error) {
	var out []*sundialv1.Operation
	err := withTimeout(ctx, e.timeout, func(ctx context.Context) error {
		resp, err := cl.Cluster().ListOperations(ctx, &sundialv1.ListOperationsRequest{})
		for _, op := range resp.GetOperations() {
			if want[op.GetOperationId()] {
				out = append(out, op)
			}
		}
		return err
	})
	return out, err
}

// removeView is the answer of remove-node.
type removeView struct {
	NodeID            uint64 `json:"node_id" yaml:"node_id"`
	State             string `json:"state" yaml:"state"`
	LeftMetaGroup     bool   `json:"left_meta_group" yaml:"left_meta_group"`
	PromotedMetaVoter uint64 `json:"promoted_meta_voter,omitempty" yaml:"promoted_meta_voter,omitempty"`
}

func renderRemove(w io.Writer, format string, v removeView) error {
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "NODE", "STATE", "META GROUP", "NEW META VOTER")
		meta := "not a member"
		if v.LeftMetaGroup {
			meta = "left"
		}
		t.AppendRow([]any{v.NodeID, v.State, meta, nodeOrDash(v.PromotedMetaVoter)})
		t.Render()
	})
}

func runRemoveNode(ctx context.Context, c *cli.Context, e *env) error {
	id, err := nodeArg(c, "remove-node")
	if err != nil {
		return err
	}
	op := fmt.Sprintf("remove-node %d", id)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().RemoveNode(ctx, &sundialv1.RemoveNodeRequest{NodeId: id, Force: c.Bool("force")})
		if err != nil {
			return refusal(op, err)
		}
		return renderRemove(e.stdout, e.output, removeView{
			NodeID: id, State: stateName(resp.GetNode().GetState()),
			LeftMetaGroup: resp.GetLeftMetaGroup(), PromotedMetaVoter: resp.GetPromotedMetaVoter(),
		})
	})
}
