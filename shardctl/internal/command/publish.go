package command

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// publishBatch is how many messages one Publish call carries.
const publishBatch = 500

func publishCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:      "publish",
		Usage:     "publish messages: one per argument, or one per stdin line when none is given",
		ArgsUsage: "[MSG...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "topic to publish to (required)"},
			&cli.DurationFlag{Name: "delay", Usage: "deliver after this long, e.g. 5s"},
			&cli.StringFlag{Name: "at", Usage: "deliver at this RFC 3339 time, e.g. 2030-01-02T15:04:05Z"},
			&cli.DurationFlag{Name: "ttl", Usage: "drop the message if not delivered this long after it is due"},
			&cli.StringFlag{Name: "key", Usage: "message key (dedup, cancel and reschedule by key)"},
			&cli.StringSliceFlag{Name: "header", Aliases: []string{"H"}, Usage: "header `k=v` (repeatable)"},
			&cli.IntFlag{Name: "priority", Usage: "lower is delivered first among messages due at the same time"},
			&cli.StringFlag{Name: "on-conflict", Usage: "when --key is pending already: ignore (default), replace, debounce or reject"},
			&cli.DurationFlag{Name: "max-wait", Usage: "with --on-conflict debounce: never push the due time past first publish + this"},
			&cli.StringFlag{Name: "fairness-key", Usage: "FAIR topics: the message's fairness key, e.g. tenant-a.job-7"},
		},
		Action: action,
	}
}

// parseHeaders parses repeated k=v flags.
func parseHeaders(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	h := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, usagef("--header %q: want key=value", kv)
		}
		if _, dup := h[k]; dup {
			return nil, usagef("--header %q: key %q given twice", kv, k)
		}
		h[k] = v
	}
	return h, nil
}

// messageTemplate builds the message every payload is published with, or a
// usage error. now is the reference time for --at checks.
func messageTemplate(c *cli.Context) (*sundialv1.Message, error) {
	topic := c.String("topic")
	if topic == "" {
		return nil, usagef("--topic is required")
	}
	m := &sundialv1.Message{Topic: topic, Key: c.String("key")}
	delaySet, atSet := c.IsSet("delay"), c.IsSet("at")
	if delaySet && atSet {
		return nil, usagef("--delay and --at are mutually exclusive: give one")
	}
	if delaySet {
		d := c.Duration("delay")
		if d < 0 {
			return nil, usagef("--delay %v: want a positive duration", d)
		}
		m.DelayMs = d.Milliseconds()
	}
	if atSet {
		at, err := time.Parse(time.RFC3339Nano, c.String("at"))
		if err != nil {
			return nil, usagef("--at %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z", c.String("at"))
		}
		m.DeliverAtUnixMs = at.UnixMilli()
	}
	ttl := c.Duration("ttl")
	if ttl < 0 {
		return nil, usagef("--ttl %v: want a positive duration", ttl)
	}
	m.TtlMs = ttl.Milliseconds()
	if err := conflictFromFlags(c, m); err != nil {
		return nil, err
	}
	m.FairnessKey = c.String("fairness-key")
	p := c.Int("priority")
	if p < -1<<31 || p > 1<<31-1 {
		return nil, usagef("--priority %d: out of range", p)
	}
	m.Priority = int32(p)
	h, err := parseHeaders(c.StringSlice("header"))
	if err != nil {
		return nil, err
	}
	m.Headers = h
	return m, nil
}

// readLines returns the non-empty lines of r, each one payload.
func readLines(r io.Reader) ([][]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out [][]byte
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if line == "" {
			continue
		}
		out = append(out, []byte(line))
	}
	return out, sc.Err()
}

// publishedView is one published message as rendered.
type publishedView struct {
	Index       int    `json:"index" yaml:"index"`
	MessageID   string `json:"message_id" yaml:"message_id"`
	DueAt       string `json:"due_at" yaml:"due_at"`
	DueAtUnixMs int64  `json:"due_at_unix_ms" yaml:"due_at_unix_ms"`
	// KeyOutcome says what a keyed publish did (created, ignored, replaced,
	// debounced).
	KeyOutcome string `json:"key_outcome,omitempty" yaml:"key_outcome,omitempty"`
}

func formatMs(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func runPublish(ctx context.Context, c *cli.Context, e *env) error {
	tmpl, err := messageTemplate(c)
	if err != nil {
		return err
	}
	payloads := make([][]byte, 0, c.Args().Len())
	for _, a := range c.Args().Slice() {
		payloads = append(payloads, []byte(a))
	}
	if len(payloads) == 0 {
		if payloads, err = readLines(e.stdin); err != nil {
			return fmt.Errorf("publish: reading stdin: %w", err)
		}
		if len(payloads) == 0 {
			return usagef("publish: no messages: give them as arguments or one per line on stdin")
		}
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()

	var (
		done   []publishedView
		failed int
	)
	for start := 0; start < len(payloads); start += publishBatch {
		end := min(start+publishBatch, len(payloads))
		msgs := make([]*sundialv1.Message, 0, end-start)
		for _, p := range payloads[start:end] {
			m := cloneMessage(tmpl)
			m.Payload = p
			msgs = append(msgs, m)
		}
		cctx, cancel := context.WithTimeout(ctx, e.timeout)
		res, err := cl.Publish(cctx, msgs...)
		cancel()
		if err != nil {
			if len(done) > 0 {
				_ = renderPublished(e.stdout, e.output, done)
			}
			fmt.Fprintf(e.stderr, "shardctl: publish: %d of %d messages stored before the failure\n", len(done), len(payloads))
			return &opError{op: "publish", err: err}
		}
		for i, r := range res {
			idx := start + i
			if err := client.StatusError(r.GetError()); err != nil {
				failed++
				printError(e.stderr, fmt.Sprintf("shardctl: publish: message %d: ", idx), err)
				continue
			}
			done = append(done, publishedView{Index: idx, MessageID: r.GetMessageId(), DueAt: formatMs(r.GetDueAtUnixMs()), DueAtUnixMs: r.GetDueAtUnixMs(), KeyOutcome: keyOutcome(tmpl, r)})
		}
	}
	if err := renderPublished(e.stdout, e.output, done); err != nil {
		return err
	}
	if failed > 0 {
		return &silentError{msg: fmt.Sprintf("publish: %d of %d messages failed", failed, len(payloads))}
	}
	return nil
}

func cloneMessage(m *sundialv1.Message) *sundialv1.Message {
	c := &sundialv1.Message{
		Topic: m.GetTopic(), DelayMs: m.GetDelayMs(), DeliverAtUnixMs: m.GetDeliverAtUnixMs(), TtlMs: m.GetTtlMs(),
		Key: m.GetKey(), FairnessKey: m.GetFairnessKey(), Priority: m.GetPriority(),
		OnKeyConflict: m.GetOnKeyConflict(), MaxWaitMs: m.GetMaxWaitMs(),
	}
	if len(m.GetHeaders()) > 0 {
		c.Headers = make(map[string]string, len(m.GetHeaders()))
		for k, v := range m.GetHeaders() {
			c.Headers[k] = v
		}
	}
	return c
}

func renderPublished(w io.Writer, format string, views []publishedView) error {
	if views == nil {
		views = []publishedView{}
	}
	return render(w, format, views, func(w io.Writer) {
		keyed := false
		for _, v := range views {
			keyed = keyed || v.KeyOutcome != ""
		}
		if !keyed {
			t := newTable(w, "#", "MESSAGE ID", "DUE")
			for _, v := range views {
				t.AppendRow([]any{v.Index, v.MessageID, v.DueAt})
			}
			t.Render()
			return
		}
		t := newTable(w, "#", "MESSAGE ID", "DUE", "KEY OUTCOME")
		for _, v := range views {
			t.AppendRow([]any{v.Index, v.MessageID, v.DueAt, v.KeyOutcome})
		}
		t.Render()
	})
}

// conflictFromFlags sets the key-conflict policy of --on-conflict and
// --max-wait.
func conflictFromFlags(c *cli.Context, m *sundialv1.Message) error {
	switch oc := c.String("on-conflict"); oc {
	case "":
	case "ignore":
		m.OnKeyConflict = sundialv1.KeyConflict_KEY_CONFLICT_IGNORE
	case "replace":
		m.OnKeyConflict = sundialv1.KeyConflict_KEY_CONFLICT_REPLACE
	case "debounce":
		m.OnKeyConflict = sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE
	case "reject":
		m.OnKeyConflict = sundialv1.KeyConflict_KEY_CONFLICT_REJECT
	default:
		return usagef("--on-conflict %q: want ignore, replace, debounce or reject", oc)
	}
	if m.OnKeyConflict != sundialv1.KeyConflict_KEY_CONFLICT_UNSPECIFIED && m.Key == "" {
		return usagef("--on-conflict needs --key")
	}
	if c.IsSet("max-wait") {
		d := c.Duration("max-wait")
		switch {
		case m.OnKeyConflict != sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE:
			return usagef("--max-wait is only for --on-conflict debounce")
		case d <= 0:
			return usagef("--max-wait %v: want a positive duration", d)
		}
		m.MaxWaitMs = d.Milliseconds()
	}
	return nil
}

// keyOutcomeName names a publish's key outcome, "" for messages without a
// key's outcome.
func keyOutcomeName(o sundialv1.KeyOutcome) string {
	if o == sundialv1.KeyOutcome_KEY_OUTCOME_UNSPECIFIED {
		return ""
	}
	return enumName(o.String(), "KEY_OUTCOME_")
}

// keyOutcome is the rendered key outcome of a keyed publish, "" without a key.
func keyOutcome(tmpl *sundialv1.Message, r *sundialv1.PublishResult) string {
	if tmpl.GetKey() == "" {
		return ""
	}
	return keyOutcomeName(r.GetKeyOutcome())
}
