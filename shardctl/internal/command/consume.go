package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func consumeCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:  "consume",
		Usage: "print deliveries of a topic (and ack them unless --no-ack)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "topic to consume (required)"},
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "consumer group (default: default)"},
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "stop after this many messages (0: until Ctrl-C or --timeout)"},
			&cli.DurationFlag{Name: "timeout", Usage: "give up after this long (0: never); exits 1 if --count was not reached"},
			&cli.BoolFlag{Name: "no-ack", Usage: "leave deliveries unacked: they come back after the visibility timeout"},
			&cli.IntFlag{Name: "max-in-flight", Usage: "deliveries held at once (default: min(count, 64))"},
		},
		Action: action,
	}
}

type consumeOptions struct {
	sub     client.SubscribeOptions
	count   int
	timeout time.Duration
	noAck   bool
}

func consumeFromFlags(c *cli.Context) (consumeOptions, error) {
	o := consumeOptions{
		sub:     client.SubscribeOptions{Topic: c.String("topic"), Group: c.String("group"), MaxInFlight: c.Int("max-in-flight")},
		count:   c.Int("count"),
		timeout: c.Duration("timeout"),
		noAck:   c.Bool("no-ack"),
	}
	switch {
	case c.Args().Len() > 0:
		return o, usagef("consume takes no arguments, got %q", c.Args().Slice())
	case o.sub.Topic == "":
		return o, usagef("--topic is required")
	case o.count < 0:
		return o, usagef("--count %d: want 0 (no limit) or more", o.count)
	case o.timeout < 0:
		return o, usagef("--timeout %v: want 0 (none) or a positive duration", o.timeout)
	case o.sub.MaxInFlight < 0 || o.sub.MaxInFlight > 1<<16:
		return o, usagef("--max-in-flight %d: want 1..65536", o.sub.MaxInFlight)
	}
	if o.sub.MaxInFlight == 0 {
		o.sub.MaxInFlight = 64
		if o.count > 0 && o.count < 64 {
			o.sub.MaxInFlight = o.count
		}
	}
	return o, nil
}

// deliveryView is one delivery as rendered in json and yaml.
type deliveryView struct {
	MessageID   string            `json:"message_id" yaml:"message_id"`
	Topic       string            `json:"topic" yaml:"topic"`
	Group       string            `json:"group,omitempty" yaml:"group,omitempty"`
	Attempt     int32             `json:"attempt" yaml:"attempt"`
	DueAt       string            `json:"due_at" yaml:"due_at"`
	PublishedAt string            `json:"published_at,omitempty" yaml:"published_at,omitempty"`
	Key         string            `json:"key,omitempty" yaml:"key,omitempty"`
	Headers     map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	Payload     string            `json:"payload" yaml:"payload"`
	// PayloadBase64 is set instead of Payload when the payload is not UTF-8.
	PayloadBase64 []byte `json:"payload_base64,omitempty" yaml:"payload_base64,omitempty"`
}

// writeDelivery prints one delivery: a line in table mode, one JSON object
// per line, or one YAML document.
func writeDelivery(w io.Writer, format string, d *sundialv1.Delivery) error {
	switch format {
	case "json", "yaml":
		v := deliveryView{
			MessageID: d.GetMessageId(), Topic: d.GetTopic(), Group: d.GetGroup(), Attempt: d.GetAttempt(),
			DueAt: formatMs(d.GetDueAtUnixMs()), PublishedAt: formatMs(d.GetPublishedAtUnixMs()),
			Key: d.GetKey(), Headers: d.GetHeaders(),
		}
		if utf8.Valid(d.GetPayload()) {
			v.Payload = string(d.GetPayload())
		} else {
			v.PayloadBase64 = d.GetPayload()
		}
		if format == "json" {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(w, "%s\n", b)
			return err
		}
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "---\n%s", b)
		return err
	default:
		_, err := fmt.Fprintf(w, "%s %s attempt=%d %s\n", formatMs(d.GetDueAtUnixMs()), d.GetMessageId(), d.GetAttempt(), linePayload(d.GetPayload()))
		return err
	}
}

// linePayload keeps a payload on one line: quoted when it has control
// characters or is not UTF-8.
func linePayload(p []byte) string {
	s := string(p)
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return strconv.Quote(s)
		}
	}
	return s
}

func runConsume(ctx context.Context, c *cli.Context, e *env) error {
	o, err := consumeFromFlags(c)
	if err != nil {
		return err
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()

	parent := ctx
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	var (
		mu       sync.Mutex // guards printed and writeErr, serializes output
		printed  int
		writeErr error
	)
	o.sub.OnStreamError = func(err error) {
		if err != nil {
			fmt.Fprintf(e.stderr, "shardctl: consume: stream broke (%v); reconnecting\n", err)
		}
	}
	subErr := cl.Subscribe(ctx, o.sub, func(hctx context.Context, d *client.Delivery) {
		mu.Lock()
		if o.count > 0 && printed >= o.count {
			mu.Unlock()
			// Over the count: hand it straight back for someone else. The
			// subscription may already be stopping; the Nack must still go out.
			actx, cancel := context.WithTimeout(context.WithoutCancel(hctx), e.timeout)
			_ = d.Nack(actx, 0, "shardctl consume: count reached")
			cancel()
			return
		}
		printed++
		n := printed
		if err := writeDelivery(e.stdout, e.output, d.Delivery); err != nil && writeErr == nil {
			writeErr = err
			stop()
		}
		mu.Unlock()
		if !o.noAck {
			// A printed message is acked even when --timeout or the count
			// has just stopped the subscription, so it is not redelivered.
			actx, cancel := context.WithTimeout(context.WithoutCancel(hctx), e.timeout)
			if err := d.Ack(actx); err != nil {
				printError(e.stderr, fmt.Sprintf("shardctl: consume: ack %s: ", d.MessageId), err)
			}
			cancel()
		}
		if o.count > 0 && n >= o.count {
			stop()
		}
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case subErr != nil:
		return &opError{op: "consume", err: subErr}
	case writeErr != nil:
		return fmt.Errorf("consume: writing output: %w", writeErr)
	case o.count > 0 && printed >= o.count:
		return nil
	case o.count > 0 && parent.Err() != nil:
		return &silentError{msg: fmt.Sprintf("consume: interrupted after %d of %d messages", printed, o.count)}
	case o.count > 0 && !errors.Is(ctx.Err(), context.Canceled):
		return &silentError{msg: fmt.Sprintf("consume: timed out after %v with %d of %d messages", o.timeout, printed, o.count)}
	}
	return nil
}
