package command

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
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

	ReleaseRatePerSec float64          `json:"release_rate_per_sec,omitempty" yaml:"release_rate_per_sec,omitempty"`
	Jitter            string           `json:"jitter,omitempty" yaml:"jitter,omitempty"`
	BackoffBase       string           `json:"backoff_base,omitempty" yaml:"backoff_base,omitempty"`
	BackoffMax        string           `json:"backoff_max,omitempty" yaml:"backoff_max,omitempty"`
	FairnessWeights   map[string]int32 `json:"fairness_weights,omitempty" yaml:"fairness_weights,omitempty"`
	Stats             []groupStatsView `json:"stats,omitempty" yaml:"stats,omitempty"`
}

// groupStatsView is the rendered form of GroupStats.
type groupStatsView struct {
	Group          string  `json:"group" yaml:"group"`
	Scheduled      int64   `json:"scheduled" yaml:"scheduled"`
	Ready          int64   `json:"ready" yaml:"ready"`
	InFlight       int64   `json:"in_flight" yaml:"in_flight"`
	DeadLettered   int64   `json:"dead_lettered" yaml:"dead_lettered"`
	OldestReadyAge string  `json:"oldest_ready_age,omitempty" yaml:"oldest_ready_age,omitempty"`
	LatenessP50Ms  float64 `json:"lateness_p50_ms" yaml:"lateness_p50_ms"`
	LatenessP99Ms  float64 `json:"lateness_p99_ms" yaml:"lateness_p99_ms"`
}

func newGroupStatsView(s *sundialv1.GroupStats) groupStatsView {
	return groupStatsView{
		Group: s.GetGroup(), Scheduled: s.GetScheduled(), Ready: s.GetReady(), InFlight: s.GetInFlight(),
		DeadLettered: s.GetDeadLettered(), OldestReadyAge: msDuration(s.GetOldestReadyAgeMs()),
		LatenessP50Ms: s.GetLatenessP50Ms(), LatenessP99Ms: s.GetLatenessP99Ms(),
	}
}

// statsHeader and statsRow render group stats as table columns.
var statsHeader = []any{"GROUP", "SCHEDULED", "READY", "IN FLIGHT", "DEAD-LETTERED", "OLDEST READY", "LATENESS P50", "LATENESS P99"}

func statsRow(v groupStatsView) []any {
	return []any{v.Group, v.Scheduled, v.Ready, v.InFlight, v.DeadLettered, v.OldestReadyAge, fmtMs(v.LatenessP50Ms), fmtMs(v.LatenessP99Ms)}
}

func fmtMs(ms float64) string {
	return strconv.FormatFloat(ms, 'f', -1, 64) + "ms"
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
	v.ReleaseRatePerSec = t.GetReleaseRatePerSec()
	v.Jitter = msDuration(t.GetJitterMs())
	v.BackoffBase = msDuration(t.GetBackoffBaseMs())
	v.BackoffMax = msDuration(t.GetBackoffMaxMs())
	if len(t.GetFairnessWeights()) > 0 {
		v.FairnessWeights = t.GetFairnessWeights()
	}
	for _, st := range t.GetStats() {
		v.Stats = append(v.Stats, newGroupStatsView(st))
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
		if v.ReleaseRatePerSec != 0 {
			t.AppendRow(table.Row{"release rate", strconv.FormatFloat(v.ReleaseRatePerSec, 'f', -1, 64) + "/s"})
		}
		for _, r := range []struct{ name, val string }{{"jitter", v.Jitter}, {"backoff base", v.BackoffBase}, {"backoff max", v.BackoffMax}} {
			if r.val != "" {
				t.AppendRow(table.Row{r.name, r.val})
			}
		}
		if len(v.FairnessWeights) > 0 {
			keys := slices.Sorted(maps.Keys(v.FairnessWeights))
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%d", k, v.FairnessWeights[k]))
			}
			t.AppendRow(table.Row{"fairness weights", strings.Join(parts, ",")})
		}
		t.Render()
		if len(v.Stats) > 0 {
			fmt.Fprintln(w)
			st := newTable(w, statsHeader...)
			for _, g := range v.Stats {
				st.AppendRow(statsRow(g))
			}
			st.Render()
		}
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
	partitions := c.Int("partitions")
	if partitions < 0 || partitions > 1<<16 {
		return nil, false, usagef("--partitions %d: want 0..65536", partitions)
	}
	t.Partitions = int32(partitions)
	maxAttempts := c.Int("max-attempts")
	if maxAttempts < 0 || maxAttempts > 1<<20 {
		return nil, false, usagef("--max-attempts %d: want 0 or more", maxAttempts)
	}
	t.MaxAttempts = int32(maxAttempts)
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
	maxMessageBytes := c.Int64("max-message-bytes")
	if maxMessageBytes < 0 {
		return nil, false, usagef("--max-message-bytes %d: want 0 (default) or more", maxMessageBytes)
	}
	t.MaxMessageBytes = maxMessageBytes
	return t, c.Bool("if-not-exists"), nil
}

func runTopicsCreate(ctx context.Context, c *cli.Context, e *env) error {
	t, ifNotExists, err := topicFromFlags(c)
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		got, err := cl.Admin().CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: t, IfNotExists: ifNotExists})
		if err != nil {
			return &opError{op: "topics create " + t.GetName(), err: err}
		}
		return renderTopic(e.stdout, e.output, got)
	})
}

func runTopicsList(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("topics list takes no arguments (use --prefix), got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
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
	})
}

func runTopicsGet(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("topics get takes exactly one NAME, got %d arguments", c.Args().Len())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		t, err := cl.Admin().GetTopic(ctx, &sundialv1.GetTopicRequest{Name: c.Args().First()})
		if err != nil {
			return &opError{op: fmt.Sprintf("topics get %s", c.Args().First()), err: err}
		}
		return renderTopic(e.stdout, e.output, t)
	})
}
