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

// changeView is the answer of cancel or reschedule. Any definite outcome
// (done, in flight, already delivered, not found) exits 0: the command
// got its answer.
type changeView struct {
	Outcome   string `json:"outcome" yaml:"outcome"`
	MessageID string `json:"message_id,omitempty" yaml:"message_id,omitempty"`
	DueAt     string `json:"due_at,omitempty" yaml:"due_at,omitempty"`
}

func outcomeName(o sundialv1.ChangeOutcome) string {
	return enumName(o.String(), "CHANGE_OUTCOME_")
}

func renderChange(w io.Writer, format string, v changeView) error {
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "OUTCOME", "MESSAGE ID", "DUE")
		t.AppendRow([]any{v.Outcome, v.MessageID, v.DueAt})
		t.Render()
	})
}

func runCancel(ctx context.Context, c *cli.Context, e *env) error {
	sel, err := selectorFromFlags(c, "cancel")
	if err != nil {
		return err
	}
	opts := changeOptions(c)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cancel(ctx, sel, opts...)
		if err != nil {
			return &opError{op: "cancel", err: err}
		}
		return renderChange(e.stdout, e.output, changeView{Outcome: outcomeName(resp.GetOutcome()), MessageID: resp.GetMessageId()})
	})
}

func rescheduleCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:  "reschedule",
		Usage: "move a pending message to a new due time; prints done, in_flight, already_delivered or not_found",
		Flags: append(changeFlags(),
			&cli.DurationFlag{Name: "delay", Usage: "due this long from now"},
			&cli.StringFlag{Name: "at", Usage: "due at `T`: RFC 3339, now or now+D"},
		),
		Action: action,
	}
}

// rescheduleWhen reads exactly one of --delay and --at.
func rescheduleWhen(c *cli.Context, now time.Time) (time.Duration, time.Time, error) {
	delaySet, atSet := c.IsSet("delay"), c.IsSet("at")
	switch {
	case delaySet && atSet:
		return 0, time.Time{}, usagef("--delay and --at are mutually exclusive: give one")
	case !delaySet && !atSet:
		return 0, time.Time{}, usagef("reschedule needs the new due time: give --delay or --at")
	case delaySet:
		d := c.Duration("delay")
		if d < 0 {
			return 0, time.Time{}, usagef("--delay %v: want 0 or a positive duration", d)
		}
		return d, time.Time{}, nil
	}
	at, err := parseWhen("at", c.String("at"), now)
	if err != nil {
		return 0, time.Time{}, err
	}
	if at.Before(now.Add(-time.Second)) {
		return 0, time.Time{}, usagef("--at %q is in the past", c.String("at"))
	}
	return 0, at, nil
}

func runReschedule(ctx context.Context, c *cli.Context, e *env) error {
	sel, err := selectorFromFlags(c, "reschedule")
	if err != nil {
		return err
	}
	delay, at, err := rescheduleWhen(c, time.Now())
	if err != nil {
		return err
	}
	opts := changeOptions(c)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		var resp *sundialv1.RescheduleResponse
		if at.IsZero() {
			resp, err = cl.RescheduleIn(ctx, sel, delay, opts...)
		} else {
			resp, err = cl.RescheduleAt(ctx, sel, at, opts...)
		}
		if err != nil {
			return &opError{op: "reschedule", err: err}
		}
		return renderChange(e.stdout, e.output, changeView{Outcome: outcomeName(resp.GetOutcome()), MessageID: resp.GetMessageId(), DueAt: formatMs(resp.GetDueAtUnixMs())})
	})
}

func receiveCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:  "receive",
		Usage: "pull deliveries once (long poll) and print them, acking unless --no-ack",
		Flags: []cli.Flag{
			topicFlag(),
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "consumer group (default: default)"},
			&cli.IntFlag{Name: "max", Aliases: []string{"n"}, Value: 10, Usage: "most deliveries to take, 1..1000"},
			&cli.DurationFlag{Name: "wait", Usage: "wait up to this long for a first delivery (0..20s)"},
			&cli.BoolFlag{Name: "no-ack", Usage: "leave deliveries unacked: they come back after the visibility timeout"},
		},
		Action: action,
	}
}

func receiveFromFlags(c *cli.Context) (client.ReceiveOptions, error) {
	o := client.ReceiveOptions{Topic: c.String("topic"), Group: c.String("group"), MaxMessages: c.Int("max"), Wait: c.Duration("wait")}
	switch {
	case c.Args().Len() > 0:
		return o, usagef("receive takes no arguments, got %q", c.Args().Slice())
	case o.Topic == "":
		return o, usagef("--topic is required")
	case o.MaxMessages < 1 || o.MaxMessages > 1000:
		return o, usagef("--max %d: want 1..1000", o.MaxMessages)
	case o.Wait < 0 || o.Wait > 20*time.Second:
		return o, usagef("--wait %v: want 0..20s", o.Wait)
	}
	return o, nil
}

func runReceive(ctx context.Context, c *cli.Context, e *env) error {
	o, err := receiveFromFlags(c)
	if err != nil {
		return err
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, e.timeout+o.Wait)
	defer cancel()
	ds, err := cl.Receive(rctx, o)
	if err != nil {
		return &opError{op: "receive", err: err}
	}
	var receipts []string
	for _, d := range ds {
		if err := writeDelivery(e.stdout, e.output, d.Delivery); err != nil {
			return err
		}
		receipts = append(receipts, d.GetReceipt())
	}
	if c.Bool("no-ack") || len(receipts) == 0 {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	res, err := cl.Ack(actx, receipts...)
	if err != nil {
		return &opError{op: "receive: ack", err: err}
	}
	failed := 0
	for _, r := range res {
		if err := client.StatusError(r.GetError()); err != nil {
			failed++
			printError(e.stderr, "shardctl: receive: ack "+r.GetReceipt()+": ", err)
		}
	}
	if failed > 0 {
		return &silentError{msg: fmt.Sprintf("receive: %d of %d acks failed", failed, len(receipts))}
	}
	return nil
}
