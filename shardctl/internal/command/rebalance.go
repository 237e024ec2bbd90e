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
)

func rebalanceCommand(act cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name: "rebalance",
		Usage: "move replicas and leaderships until nodes hold balanced counts; " +
			"waits until the operations end and plans again until nothing is left to move, unless --no-wait",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "print the plan and change nothing"},
			&cli.BoolFlag{Name: "no-wait", Usage: "return once the plan is submitted"},
			&cli.UintFlag{Name: "max-operations", Usage: "plan at most `N` operations (0: the planner's default, 16)"},
			&cli.DurationFlag{Name: "wait-timeout", Value: 30 * time.Minute, Usage: "give up waiting after `D`"},
		},
		Action: act,
	}
}

// operationsCommand lists the operations (as `operations` and
// `operations list`) and cancels one (`operations cancel ID`); leaf adds
// the common flags to each.
func operationsCommand(leaf func(*cli.Command) *cli.Command, listAct, cancelAct cli.ActionFunc) *cli.Command {
	listFlags := func() []cli.Flag {
		return []cli.Flag{&cli.BoolFlag{Name: "unfinished", Usage: "only pending and running operations"}}
	}
	return leaf(&cli.Command{
		Name:            "operations",
		Usage:           "list the cluster operations (replica moves, leadership transfers) and their progress; cancel one",
		Flags:           listFlags(),
		Action:          listAct,
		HideHelpCommand: true,
		Subcommands: []*cli.Command{
			leaf(&cli.Command{Name: "list", Usage: "list the cluster operations (as shardctl operations)", Flags: listFlags(), Action: listAct}),
			leaf(&cli.Command{
				Name:      "cancel",
				Usage:     "cancel an unfinished operation: it is rolled back from the step it is at",
				ArgsUsage: "ID",
				Description: "A pending operation, or one at a step with nothing to undo, ends rolled-back at once. One at\n" +
					"delete-data ends done with the step skipped (the move is made; the old node deletes the data\n" +
					"itself). One at add-learner, wait-catch-up, promote or a move's transfer-leader is rolled back:\n" +
					"the replica it added leaves the shard. Refused at remove-replica (the old replica is leaving and\n" +
					"cannot be put back), for topic and group operations (they roll forward), and where removing the\n" +
					"added replica would leave the shard fewer than a majority of live replicas. Cancelling an\n" +
					"operation that has ended changes nothing and says how it ended.",
				Flags:  []cli.Flag{yesFlag()},
				Action: cancelAct,
			}),
		},
	})
}

// operationView is one operation as shardctl prints it.
type operationView struct {
	ID       uint64   `json:"id" yaml:"id"`
	Kind     string   `json:"kind" yaml:"kind"`
	Shard    uint64   `json:"shard_id" yaml:"shard_id"`
	From     uint64   `json:"from_node_id,omitempty" yaml:"from_node_id,omitempty"`
	To       uint64   `json:"to_node_id,omitempty" yaml:"to_node_id,omitempty"`
	Reason   string   `json:"reason" yaml:"reason"`
	Status   string   `json:"status" yaml:"status"`
	Step     string   `json:"step,omitempty" yaml:"step,omitempty"`
	Steps    []string `json:"steps" yaml:"steps"`
	Error    string   `json:"error,omitempty" yaml:"error,omitempty"`
	Duration string   `json:"duration,omitempty" yaml:"duration,omitempty"`
	// Outcome is what was skipped and why ("delete-data 3: skipped: ..."),
	// Cancel who asked for a cancel; both empty for most operations.
	Outcome string `json:"outcome,omitempty" yaml:"outcome,omitempty"`
	Cancel  string `json:"cancel,omitempty" yaml:"cancel,omitempty"`
}

// operationsView is the answer of rebalance and operations.
type operationsView struct {
	// DryRun: the operations are a plan, not submitted.
	DryRun bool `json:"dry_run,omitempty" yaml:"dry_run,omitempty"`
	// Running: a rebalance was already running; these are its operations.
	Running    bool            `json:"already_running,omitempty" yaml:"already_running,omitempty"`
	Operations []operationView `json:"operations" yaml:"operations"`
	// SuspectNodes are the nodes the meta leader has not heard from
	// lately: the plan left them out (nothing moves onto or off them).
	SuspectNodes []uint64 `json:"suspect_nodes,omitempty" yaml:"suspect_nodes,omitempty"`
}

// progress is the STEP column of an operation in a table: its error once
// it failed, how long it took once it ended, else the step it is at.
func (op operationView) progress() string {
	switch {
	case op.Error != "":
		return op.Error
	case op.Duration != "" && op.Outcome != "":
		return "took " + op.Duration + "; " + op.Outcome
	case op.Duration != "":
		return "took " + op.Duration
	}
	return op.Step
}

func viewOperations(ops []*sundialv1.Operation) []operationView {
	out := make([]operationView, 0, len(ops))
	for _, op := range ops {
		v := operationView{
			ID: op.GetOperationId(), Kind: op.GetKind(), Shard: op.GetShardId(), From: op.GetFromNodeId(),
			To: op.GetToNodeId(), Reason: op.GetReason(), Status: op.GetStatus(), Error: op.GetError(), Cancel: op.GetCancel(),
		}
		if v.Status == "" {
			v.Status = "planned"
		}
		for i, s := range op.GetSteps() {
			if s.GetShardId() != 0 { // a topic or group step: done on that shard's leader
				v.Steps = append(v.Steps, fmt.Sprintf("%s shard %d", s.GetKind(), s.GetShardId()))
			} else {
				v.Steps = append(v.Steps, fmt.Sprintf("%s %d", s.GetKind(), s.GetNodeId()))
			}
			if s.GetOutcome() != "" {
				v.Outcome = fmt.Sprintf("%s %d: %s", s.GetKind(), s.GetNodeId(), s.GetOutcome())
			}
			if i == int(op.GetCurrentStep()) && (v.Status == "running" || v.Status == "pending") {
				v.Step = fmt.Sprintf("%d/%d %s", i+1, len(op.GetSteps()), s.GetKind())
			}
		}
		if op.GetStartedAtMs() > 0 && op.GetFinishedAtMs() > 0 {
			v.Duration = (time.Duration(op.GetFinishedAtMs()-op.GetStartedAtMs()) * time.Millisecond).String()
		}
		out = append(out, v)
	}
	return out
}

func renderOperations(w io.Writer, format string, v operationsView) error {
	return render(w, format, v, func(w io.Writer) {
		if len(v.SuspectNodes) > 0 {
			fmt.Fprintf(w, "nodes %s not heard from lately (not declared dead): left out of the plan, nothing moves onto or off them\n",
				joinIDs(v.SuspectNodes))
		}
		switch {
		case len(v.Operations) == 0 && v.DryRun && len(v.SuspectNodes) > 0:
			fmt.Fprintln(w, "nothing to move among the other nodes")
			return
		case len(v.Operations) == 0 && v.DryRun:
			fmt.Fprintln(w, "balanced: nothing to move")
			return
		case len(v.Operations) == 0:
			fmt.Fprintln(w, "no operations")
			return
		case v.Running:
			fmt.Fprintln(w, "a rebalance is already running; its operations:")
		}
		t := newTable(w, "ID", "KIND", "SHARD", "FROM", "TO", "REASON", "STATUS", "STEP")
		for _, op := range v.Operations {
			step := op.progress()
			if v.DryRun {
				step = strings.Join(op.Steps, ", ")
			}
			t.AppendRow([]any{idOrDash(op.ID), op.Kind, op.Shard, nodeOrDash(op.From), nodeOrDash(op.To), op.Reason, op.Status, step})
		}
		t.Render()
		if v.DryRun && !v.Running {
			fmt.Fprintf(w, "dry run: %d operations planned, nothing changed. shardctl rebalance runs them, then plans again until balanced\n"+
				"(a shard moves one replica per plan, so more may follow)\n", len(v.Operations))
		}
	})
}

func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ", ")
}

func idOrDash(id uint64) any {
	if id == 0 {
		return "-"
	}
	return id
}

func runRebalance(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("rebalance takes no arguments, got %q", c.Args().Slice())
	}
	if c.Bool("dry-run") && c.Bool("no-wait") {
		return usagef("--dry-run and --no-wait: a dry run submits nothing to wait for")
	}
	if c.Duration("wait-timeout") <= 0 {
		return usagef("--wait-timeout %v: want a positive duration", c.Duration("wait-timeout"))
	}
	req := &sundialv1.RebalanceRequest{DryRun: c.Bool("dry-run"), MaxOperations: uint32(c.Uint("max-operations"))} //nolint:gosec // the server caps it at 1000
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	var resp *sundialv1.RebalanceResponse
	// plan asks the meta leader for a plan (ctx is the wait-bounded one
	// once waiting starts).
	plan := func() error {
		return withTimeout(ctx, e.timeout, func(ctx context.Context) error {
			var err error
			resp, err = cl.Cluster().Rebalance(ctx, req)
			return err
		})
	}
	if err := plan(); err != nil {
		return &opError{op: "rebalance", err: err}
	}
	v := operationsView{DryRun: req.GetDryRun(), Running: resp.GetRunning(), Operations: viewOperations(resp.GetOperations()),
		SuspectNodes: resp.GetSuspectNodeIds()}
	if req.GetDryRun() || c.Bool("no-wait") || len(v.Operations) == 0 {
		return renderOperations(e.stdout, e.output, v)
	}
	// The planner moves at most one replica of a shard per plan, so a
	// cluster that needs two moves of a shard (three brokers joined by
	// three) takes more than one plan: once a plan's operations end, plan
	// again, until a plan is empty, one fails, or another rebalance runs.
	ctx, cancel := context.WithTimeout(ctx, c.Duration("wait-timeout"))
	defer cancel()
	var all []*sundialv1.Operation
	for round := 1; ; round++ {
		if e.output == "table" {
			what := "operations submitted"
			if round > 1 {
				what = "more operations submitted (plan " + strconv.Itoa(round) + ")"
			}
			fmt.Fprintf(e.stdout, "%d %s; waiting for them to end\n", len(resp.GetOperations()), what)
		}
		final, err := waitOperations(ctx, cl, e, ids(resp.GetOperations()), c.Duration("wait-timeout"))
		if err != nil {
			return &opError{op: "rebalance: waiting for the operations", err: err}
		}
		all = append(all, final...)
		failed := false
		for _, op := range final {
			failed = failed || op.GetStatus() != "done"
		}
		if !failed && round < maxRebalancePlans {
			if err := plan(); err != nil {
				return &opError{op: "rebalance: planning again", err: err}
			}
			if len(resp.GetOperations()) > 0 && !resp.GetRunning() {
				continue
			}
		}
		v.Operations, v.SuspectNodes = viewOperations(all), resp.GetSuspectNodeIds()
		if err := renderOperations(e.stdout, e.output, v); err != nil {
			return err
		}
		for _, op := range all {
			if op.GetStatus() != "done" {
				return &silentError{msg: fmt.Sprintf("operation %d %s: %s", op.GetOperationId(), op.GetStatus(), op.GetError())}
			}
		}
		switch {
		case e.output != "table":
		case len(resp.GetOperations()) == 0 && len(v.SuspectNodes) > 0:
			fmt.Fprintln(e.stdout, "nothing left to move among the other nodes: run shardctl rebalance again once the nodes left out answer")
		case len(resp.GetOperations()) == 0:
			fmt.Fprintln(e.stdout, "balanced: nothing left to move")
		case resp.GetRunning():
			fmt.Fprintln(e.stdout, "another rebalance's operations are running now: see shardctl operations")
		default:
			fmt.Fprintf(e.stdout, "stopped after %d plans; run shardctl rebalance again to go on\n", maxRebalancePlans)
		}
		return nil
	}
}

// maxRebalancePlans bounds the plans one shardctl rebalance submits.
const maxRebalancePlans = 20

func ids(ops []*sundialv1.Operation) map[uint64]bool {
	m := map[uint64]bool{}
	for _, op := range ops {
		m[op.GetOperationId()] = true
	}
	return m
}

// progressInterval is how often a waiting rebalance polls ListOperations.
const progressInterval = time.Second

// waitOperations polls until every operation in want has ended, printing
// a line on stderr when one ends, and answers them.
func waitOperations(ctx context.Context, cl *client.Client, e *env, want map[uint64]bool, limit time.Duration) ([]*sundialv1.Operation, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	ended := map[uint64]bool{}
	for {
		mine, err := listOperations(ctx, cl, e, want)
		if err != nil {
			return nil, err
		}
		open := 0
		for _, op := range mine {
			switch op.GetStatus() {
			case "pending", "running":
				open++
			default:
				if !ended[op.GetOperationId()] {
					ended[op.GetOperationId()] = true
					fmt.Fprintf(e.stderr, "operation %d (%s shard %d) %s\n", op.GetOperationId(), op.GetKind(), op.GetShardId(), op.GetStatus())
				}
			}
		}
		if open == 0 {
			return mine, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d operations still running after %v (see shardctl operations): %w", open, len(want), limit, ctx.Err())
		case <-time.After(progressInterval):
		}
	}
}

func withTimeout(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

// cancelView is the answer of operations cancel.
type cancelView struct {
	// AlreadyFinished: the operation had ended before the cancel; nothing
	// changed.
	AlreadyFinished bool `json:"already_finished" yaml:"already_finished"`
	// RollingBack: the cancel is recorded and the executor still rolls
	// the operation back (see shardctl operations).
	RollingBack bool          `json:"rolling_back" yaml:"rolling_back"`
	Operation   operationView `json:"operation" yaml:"operation"`
}

func runOperationsCancel(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("operations cancel takes one argument, the operation ID, got %q", c.Args().Slice())
	}
	id, err := strconv.ParseUint(c.Args().First(), 10, 64)
	if err != nil || id == 0 {
		return usagef("operations cancel %q: want an operation id (a positive integer, see shardctl operations)", c.Args().First())
	}
	if err := confirm(c, e, fmt.Sprintf("cancel operation %d and roll it back", id)); err != nil {
		return err
	}
	op := fmt.Sprintf("operations cancel %d", id)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().CancelOperation(ctx, &sundialv1.CancelOperationRequest{OperationId: id})
		if err != nil {
			return refusal(op, err)
		}
		v := cancelView{AlreadyFinished: resp.GetAlreadyFinished(), RollingBack: resp.GetOperation().GetStatus() == "running",
			Operation: viewOperations([]*sundialv1.Operation{resp.GetOperation()})[0]}
		return render(e.stdout, e.output, v, func(w io.Writer) {
			o := v.Operation
			switch {
			case v.AlreadyFinished:
				fmt.Fprintf(w, "operation %d had already ended (%s%s): nothing changed\n", o.ID, o.Status, colonIf(o.Error))
			case v.RollingBack:
				fmt.Fprintf(w, "operation %d cancelled: still rolling back at %s; shardctl operations shows when it has ended\n", o.ID, o.Step)
			case o.Status == "done":
				fmt.Fprintf(w, "operation %d cancelled at its last step: the move is made (%s)\n", o.ID, o.Outcome)
			default:
				fmt.Fprintf(w, "operation %d cancelled: %s (%s)\n", o.ID, o.Status, o.Error)
			}
		})
	})
}

// colonIf is ": s", or nothing for an empty s.
func colonIf(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func runOperations(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("operations takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().ListOperations(ctx, &sundialv1.ListOperationsRequest{UnfinishedOnly: c.Bool("unfinished")})
		if err != nil {
			return &opError{op: "operations", err: err}
		}
		return renderOperations(e.stdout, e.output, operationsView{Operations: viewOperations(resp.GetOperations())})
	})
}
