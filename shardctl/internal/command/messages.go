package command

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// listFlags are the filters of messages list and dlq list.
func listFlags() []cli.Flag {
	return []cli.Flag{
		topicFlag(),
		&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "whose copies to list (default: default)"},
		&cli.StringFlag{Name: "from", Usage: "due at or after `T`: RFC 3339, now, now+10m, now-1h"},
		&cli.StringFlag{Name: "to", Usage: "due before `T` (same forms as --from)"},
		&cli.StringFlag{Name: "key-prefix", Usage: "only messages whose key starts with `P`"},
		&cli.StringFlag{Name: "header", Usage: "only messages with header `k=v`"},
		&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Value: 100, Usage: "messages to list (a page of at most 1000)"},
		&cli.StringFlag{Name: "page-token", Usage: "continue a listing where the last one stopped"},
	}
}

// listRequestFromFlags builds a listing of topic (the --topic flag unless
// topic is given).
func listRequestFromFlags(c *cli.Context, cmd, topic string, now time.Time) (*sundialv1.ListMessagesRequest, error) {
	if c.Args().Len() > 0 {
		return nil, usagef("%s takes no arguments, got %q", cmd, c.Args().Slice())
	}
	if topic == "" {
		return nil, usagef("--topic is required")
	}
	req := &sundialv1.ListMessagesRequest{Topic: topic, Group: c.String("group"), KeyPrefix: c.String("key-prefix"), PageToken: c.String("page-token")}
	var err error
	if req.FromUnixMs, err = whenMs(c, "from", now); err != nil {
		return nil, err
	}
	if req.ToUnixMs, err = whenMs(c, "to", now); err != nil {
		return nil, err
	}
	if req.FromUnixMs > 0 && req.ToUnixMs > 0 && req.ToUnixMs < req.FromUnixMs {
		return nil, usagef("--to is before --from")
	}
	if h := c.String("header"); h != "" {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, usagef("--header %q: want key=value", h)
		}
		req.HeaderKey, req.HeaderValue = k, v
	}
	n := c.Int("limit")
	if n < 1 || n > 1000 {
		return nil, usagef("--limit %d: want 1..1000", n)
	}
	req.PageSize = int32(n)
	return req, nil
}

func runMessagesList(ctx context.Context, c *cli.Context, e *env) error {
	req, err := listRequestFromFlags(c, "messages list", c.String("topic"), time.Now())
	if err != nil {
		return err
	}
	return listMessages(ctx, e, "messages list", req)
}

func runDLQList(ctx context.Context, c *cli.Context, e *env) error {
	if c.String("topic") == "" {
		return usagef("--topic is required")
	}
	req, err := listRequestFromFlags(c, "dlq list", c.String("topic")+".dlq", time.Now())
	if err != nil {
		return err
	}
	return listMessages(ctx, e, "dlq list", req)
}

func listMessages(ctx context.Context, e *env, op string, req *sundialv1.ListMessagesRequest) error {
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Admin().ListMessages(ctx, req)
		if err != nil {
			return &opError{op: op, err: err}
		}
		return renderMessages(e.stdout, e.stderr, e.output, resp)
	})
}

// messageView is the rendered form of a MessageInfo.
type messageView struct {
	MessageID   string            `json:"message_id" yaml:"message_id"`
	Topic       string            `json:"topic" yaml:"topic"`
	Key         string            `json:"key,omitempty" yaml:"key,omitempty"`
	DueAt       string            `json:"due_at" yaml:"due_at"`
	PublishedAt string            `json:"published_at,omitempty" yaml:"published_at,omitempty"`
	ExpiresAt   string            `json:"expires_at,omitempty" yaml:"expires_at,omitempty"`
	FairnessKey string            `json:"fairness_key,omitempty" yaml:"fairness_key,omitempty"`
	Priority    int32             `json:"priority,omitempty" yaml:"priority,omitempty"`
	Headers     map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
	Payload     string            `json:"payload" yaml:"payload"`
	// PayloadBase64 is set instead of Payload when the payload is not UTF-8.
	PayloadBase64 []byte     `json:"payload_base64,omitempty" yaml:"payload_base64,omitempty"`
	Copies        []copyView `json:"copies,omitempty" yaml:"copies,omitempty"`
}

type copyView struct {
	Group     string `json:"group" yaml:"group"`
	State     string `json:"state" yaml:"state"`
	Attempt   int32  `json:"attempt" yaml:"attempt"`
	VisibleAt string `json:"visible_at,omitempty" yaml:"visible_at,omitempty"`
}

func newMessageView(m *sundialv1.MessageInfo) messageView {
	v := messageView{
		MessageID: m.GetMessageId(), Topic: m.GetTopic(), Key: m.GetKey(), DueAt: formatMs(m.GetDueAtUnixMs()),
		PublishedAt: formatMs(m.GetPublishedAtUnixMs()), ExpiresAt: formatMs(m.GetExpiresAtUnixMs()),
		FairnessKey: m.GetFairnessKey(), Priority: m.GetPriority(), Headers: m.GetHeaders(),
	}
	if utf8.Valid(m.GetPayload()) {
		v.Payload = string(m.GetPayload())
	} else {
		v.PayloadBase64 = m.GetPayload()
	}
	for _, c := range m.GetCopies() {
		v.Copies = append(v.Copies, copyView{Group: c.GetGroup(), State: enumName(c.GetState().String(), "COPY_STATE_"), Attempt: c.GetAttempt(), VisibleAt: formatMs(c.GetVisibleAtUnixMs())})
	}
	return v
}

// messagePage is a listing as rendered in json and yaml.
type messagePage struct {
	Messages      []messageView `json:"messages" yaml:"messages"`
	NextPageToken string        `json:"next_page_token,omitempty" yaml:"next_page_token,omitempty"`
}

func renderMessages(w, stderr io.Writer, format string, resp *sundialv1.ListMessagesResponse) error {
	page := messagePage{Messages: []messageView{}, NextPageToken: resp.GetNextPageToken()}
	for _, m := range resp.GetMessages() {
		page.Messages = append(page.Messages, newMessageView(m))
	}
	return render(w, format, page, func(w io.Writer) {
		t := newTable(w, "DUE", "MESSAGE ID", "KEY", "PAYLOAD")
		for _, v := range page.Messages {
			p := v.Payload
			if v.PayloadBase64 != nil {
				p = fmt.Sprintf("(%d bytes, not UTF-8)", len(v.PayloadBase64))
			}
			t.AppendRow([]any{v.DueAt, v.MessageID, v.Key, truncate(linePayload([]byte(p)), 60)})
		}
		t.Render()
		if page.NextPageToken != "" {
			fmt.Fprintf(stderr, "more: --page-token %s\n", page.NextPageToken)
		}
	})
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func renderMessage(w io.Writer, format string, m *sundialv1.MessageInfo) error {
	v := newMessageView(m)
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "FIELD", "VALUE")
		t.AppendRow([]any{"message id", v.MessageID})
		t.AppendRow([]any{"topic", v.Topic})
		t.AppendRow([]any{"key", v.Key})
		t.AppendRow([]any{"due at", v.DueAt})
		t.AppendRow([]any{"published at", v.PublishedAt})
		t.AppendRow([]any{"expires at", v.ExpiresAt})
		t.AppendRow([]any{"fairness key", v.FairnessKey})
		t.AppendRow([]any{"priority", v.Priority})
		for _, k := range sortedKeys(v.Headers) {
			t.AppendRow([]any{"header " + k, v.Headers[k]})
		}
		p := linePayload(m.GetPayload())
		t.AppendRow([]any{"payload", truncate(p, 200)})
		t.Render()
		if len(v.Copies) > 0 {
			fmt.Fprintln(w)
			ct := newTable(w, "GROUP", "STATE", "ATTEMPT", "VISIBLE AT")
			for _, c := range v.Copies {
				ct.AppendRow([]any{c.Group, c.State, c.Attempt, c.VisibleAt})
			}
			ct.Render()
		}
	})
}

func runMessagesGet(ctx context.Context, c *cli.Context, e *env) error {
	sel, err := selectorFromFlags(c, "messages get")
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		m, err := cl.Admin().GetMessage(ctx, &sundialv1.GetMessageRequest{Message: sel})
		if err != nil {
			return &opError{op: "messages get", err: err}
		}
		return renderMessage(e.stdout, e.output, m)
	})
}

// histogramRequestFromFlags builds a histogram request, or a usage error.
func histogramRequestFromFlags(c *cli.Context, now time.Time) (*sundialv1.DueHistogramRequest, error) {
	if c.Args().Len() > 0 {
		return nil, usagef("messages histogram takes no arguments, got %q", c.Args().Slice())
	}
	if c.String("topic") == "" {
		return nil, usagef("--topic is required")
	}
	req := &sundialv1.DueHistogramRequest{Topic: c.String("topic"), Group: c.String("group")}
	switch b := c.String("bucket"); b {
	case "minute":
		req.Bucket = sundialv1.HistogramBucket_HISTOGRAM_BUCKET_MINUTE
	case "hour":
		req.Bucket = sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR
	default:
		return nil, usagef("--bucket %q: want minute or hour", b)
	}
	var err error
	if req.FromUnixMs, err = whenMs(c, "from", now); err != nil {
		return nil, err
	}
	if req.ToUnixMs, err = whenMs(c, "to", now); err != nil {
		return nil, err
	}
	from := req.FromUnixMs
	if from == 0 {
		from = now.UnixMilli()
	}
	if req.ToUnixMs != 0 && req.ToUnixMs <= from {
		return nil, usagef("--to must be after --from (or now)")
	}
	return req, nil
}

func runMessagesHistogram(ctx context.Context, c *cli.Context, e *env) error {
	req, err := histogramRequestFromFlags(c, time.Now())
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Admin().DueHistogram(ctx, req)
		if err != nil {
			return &opError{op: "messages histogram", err: err}
		}
		return renderHistogram(e.stdout, e.output, resp.GetCounts())
	})
}

// histogramBarWidth is the width of the longest bar.
const histogramBarWidth = 40

type bucketView struct {
	Start string `json:"start" yaml:"start"`
	Count int64  `json:"count" yaml:"count"`
}

func renderHistogram(w io.Writer, format string, counts []*sundialv1.HistogramCount) error {
	views := make([]bucketView, 0, len(counts))
	var peak int64
	for _, c := range counts {
		views = append(views, bucketView{Start: formatMs(c.GetStartUnixMs()), Count: c.GetCount()})
		peak = max(peak, c.GetCount())
	}
	return render(w, format, views, func(w io.Writer) {
		t := newTable(w, "BUCKET", "COUNT", "")
		for _, v := range views {
			bar := 0
			if peak > 0 {
				bar = int((v.Count*histogramBarWidth + peak - 1) / peak)
			}
			t.AppendRow([]any{v.Start, v.Count, strings.Repeat("█", bar)})
		}
		t.Render()
	})
}

func runDLQRedrive(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("dlq redrive takes no arguments, got %q", c.Args().Slice())
	}
	topic := c.String("topic")
	if topic == "" {
		return usagef("--topic is required")
	}
	n := c.Int64("max")
	if n < 0 {
		return usagef("--max %d: want 0 (all) or more", n)
	}
	what := fmt.Sprintf("move every dead letter of %s back to %s", topic, topic)
	if n > 0 {
		what = fmt.Sprintf("move up to %d dead letters of %s back to %s", n, topic, topic)
	}
	if err := confirm(c, e, what); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Admin().RedriveDeadLetters(ctx, &sundialv1.RedriveDeadLettersRequest{Topic: topic, MaxMessages: n})
		if err != nil {
			return &opError{op: "dlq redrive", err: err}
		}
		return renderDone(e.stdout, e.output, map[string]any{"topic": topic, "moved": resp.GetMoved()})
	})
}
