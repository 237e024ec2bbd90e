package command

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/urfave/cli/v2"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// topicView is the rendered form of a Topic.
type topicView struct {
	Name              string   `json:"name" yaml:"name"`
	Kind              string   `json:"kind" yaml:"kind"`
	Partitions        int32    `json:"partitions" yaml:"partitions"`
	VisibilityTimeout string   `json:"visibility_timeout" yaml:"visibility_timeout"`
	MaxAttempts       int32    `json:"max_attempts" yaml:"max_attempts"`
	Retention         string   `json:"retention" yaml:"retention"`
	MaxMessageBytes   int64    `json:"max_message_bytes" yaml:"max_message_bytes"`
	DedupWindow       string   `json:"dedup_window" yaml:"dedup_window"`
	Groups            []string `json:"groups" yaml:"groups"`
	CreatedAt         string   `json:"created_at" yaml:"created_at"`
}

func newTopicView(t *sundialv1.Topic) topicView {
	kind := enumName(t.GetKind().String(), "TOPIC_KIND_")
	if kind == "unspecified" {
		kind = "delayed"
	}
	v := topicView{
		Name:              t.GetName(),
		Kind:              kind,
		Partitions:        t.GetPartitions(),
		VisibilityTimeout: msDuration(t.GetVisibilityTimeoutMs()),
		MaxAttempts:       t.GetMaxAttempts(),
		Retention:         msDuration(t.GetRetentionMs()),
		MaxMessageBytes:   t.GetMaxMessageBytes(),
		DedupWindow:       msDuration(t.GetDedupWindowMs()),
		Groups:            append([]string{}, t.GetGroups()...),
	}
	if ms := t.GetCreatedAtUnixMs(); ms > 0 {
		v.CreatedAt = time.UnixMilli(ms).UTC().Format(time.RFC3339)
	}
	return v
}

func msDuration(ms int64) string {
	if ms == 0 {
		return ""
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func renderTopics(w io.Writer, format string, topics []*sundialv1.Topic) error {
	views := make([]topicView, 0, len(topics))
	for _, t := range topics {
		views = append(views, newTopicView(t))
	}
	return render(w, format, views, func(w io.Writer) {
		t := newTable(w, "NAME", "KIND", "PARTITIONS", "VISIBILITY", "MAX ATTEMPTS", "RETENTION", "MAX BYTES", "GROUPS")
		for _, v := range views {
			t.AppendRow([]any{v.Name, v.Kind, v.Partitions, v.VisibilityTimeout, v.MaxAttempts, v.Retention, v.MaxMessageBytes, strings.Join(v.Groups, ",")})
		}
		t.Render()
	})
}

func renderTopic(w io.Writer, format string, topic *sundialv1.Topic) error {
	v := newTopicView(topic)
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "FIELD", "VALUE")
		t.AppendRows([]table.Row{
			{"name", v.Name}, {"kind", v.Kind}, {"partitions", v.Partitions},
			{"visibility timeout", v.VisibilityTimeout}, {"max attempts", v.MaxAttempts},
			{"retention", v.Retention}, {"max message bytes", v.MaxMessageBytes},
			{"dedup window", v.DedupWindow}, {"groups", strings.Join(v.Groups, ",")},
			{"created at", v.CreatedAt},
		})
		t.Render()
	})
}

func topicsCreateCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a topic",
		ArgsUsage: "NAME",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "partitions", Usage: "number of partitions (0: cluster default)"},
			&cli.DurationFlag{Name: "visibility-timeout", Usage: "lease of a delivery before redelivery (0: cluster default, 30s)"},
			&cli.IntFlag{Name: "max-attempts", Usage: "deliveries before the message moves to <topic>.dlq (0: default, 10)"},
			&cli.DurationFlag{Name: "retention", Usage: "how long a message may wait (0: cluster default)"},
			&cli.Int64Flag{Name: "max-message-bytes", Usage: "largest payload accepted (0: cluster default, 1 MiB)"},
			&cli.StringFlag{Name: "kind", Value: "delayed", Usage: "delayed or fair"},
			&cli.BoolFlag{Name: "if-not-exists", Usage: "succeed when the topic already exists"},
		},
		Action: action,
	}
}

// topicFromFlags builds the topic to create, or a usage error.
func topicFromFlags(c *cli.Context) (*sundialv1.Topic, bool, error) {
	if c.Args().Len() != 1 {
		return nil, false, usagef("topics create takes exactly one NAME, got %d arguments", c.Args().Len())
	}
	t := &sundialv1.Topic{Name: c.Args().First()}
	switch k := c.String("kind"); k {
	case "delayed":
		t.Kind = sundialv1.TopicKind_TOPIC_KIND_DELAYED
	case "fair":
		t.Kind = sundialv1.TopicKind_TOPIC_KIND_FAIR
	default:
		return nil, false, usagef("--kind %q: want delayed or fair", k)
	}
	if n := c.Int("partitions"); n < 0 || n > 1<<16 {
		return nil, false, usagef("--partitions %d: want 0..65536", n)
	} else {
		t.Partitions = int32(n)
	}
	if n := c.Int("max-attempts"); n < 0 || n > 1<<20 {
		return nil, false, usagef("--max-attempts %d: want 0 or more", n)
	} else {
		t.MaxAttempts = int32(n)
	}
	for _, d := range []struct {
		flag string
		dst  *int64
	}{{"visibility-timeout", &t.VisibilityTimeoutMs}, {"retention", &t.RetentionMs}} {
		v := c.Duration(d.flag)
		if v < 0 || (v > 0 && v < time.Millisecond) {
			return nil, false, usagef("--%s %v: want 0 (default) or at least 1ms", d.flag, v)
		}
		*d.dst = v.Milliseconds()
	}
	if n := c.Int64("max-message-bytes"); n < 0 {
		return nil, false, usagef("--max-message-bytes %d: want 0 (default) or more", n)
	} else {
		t.MaxMessageBytes = n
	}
	return t, c.Bool("if-not-exists"), nil
}

func runTopicsCreate(ctx context.Context, c *cli.Context, e *env) error {
	t, ifNotExists, err := topicFromFlags(c)
	if err != nil {
		return err
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	got, err := cl.Admin().CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: t, IfNotExists: ifNotExists})
	if err != nil {
		return &opError{op: "topics create " + t.GetName(), err: err}
	}
	return renderTopic(e.stdout, e.output, got)
}

func runTopicsList(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("topics list takes no arguments (use --prefix), got %q", c.Args().Slice())
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var all []*sundialv1.Topic
	req := &sundialv1.ListTopicsRequest{Prefix: c.String("prefix"), PageSize: 1000}
	for page := 0; page < 10000; page++ {
		resp, err := cl.Admin().ListTopics(ctx, req)
		if err != nil {
			return &opError{op: "topics list", err: err}
		}
		all = append(all, resp.GetTopics()...)
		if resp.GetNextPageToken() == "" || resp.GetNextPageToken() == req.PageToken {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	return renderTopics(e.stdout, e.output, all)
}

func runTopicsGet(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("topics get takes exactly one NAME, got %d arguments", c.Args().Len())
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	t, err := cl.Admin().GetTopic(ctx, &sundialv1.GetTopicRequest{Name: c.Args().First()})
	if err != nil {
		return &opError{op: fmt.Sprintf("topics get %s", c.Args().First()), err: err}
	}
	return renderTopic(e.stdout, e.output, t)
}
