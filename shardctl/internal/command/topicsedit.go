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

func topicsUpdateCommand(action cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:      "update",
		Usage:     "change topic settings: only the flags given are changed",
		ArgsUsage: "NAME",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "visibility-timeout", Usage: "lease of a delivery before redelivery"},
			&cli.IntFlag{Name: "max-attempts", Usage: "deliveries before the message moves to <topic>.dlq"},
			&cli.DurationFlag{Name: "retention", Usage: "how long a message may wait"},
			&cli.Int64Flag{Name: "max-message-bytes", Usage: "largest payload accepted"},
			&cli.DurationFlag{Name: "dedup-window", Usage: "how long a completed key is remembered"},
			&cli.Float64Flag{Name: "release-rate", Usage: "deliveries per second released (0: unlimited)"},
			&cli.DurationFlag{Name: "jitter", Usage: "spread each due time by up to this much (0: none)"},
			&cli.DurationFlag{Name: "backoff-base", Usage: "first redelivery backoff after a nack without delay"},
			&cli.DurationFlag{Name: "backoff-max", Usage: "cap of the redelivery backoff"},
			&cli.StringSliceFlag{Name: "weight", Usage: "FAIR topics: weight of a fairness key, `key=N` (repeatable; replaces all weights)"},
		},
		Action: action,
	}
}

// topicUpdateFromFlags builds the update of the flags given, with its mask.
func topicUpdateFromFlags(c *cli.Context) (*sundialv1.UpdateTopicRequest, error) {
	if c.Args().Len() != 1 {
		return nil, usagef("topics update takes exactly one NAME, got %d arguments", c.Args().Len())
	}
	t := &sundialv1.Topic{Name: c.Args().First()}
	req := &sundialv1.UpdateTopicRequest{Topic: t}
	durations := []struct {
		flag, field string
		dst         *int64
		zeroOK      bool
	}{
		{"visibility-timeout", "visibility_timeout_ms", &t.VisibilityTimeoutMs, false},
		{"retention", "retention_ms", &t.RetentionMs, false},
		{"dedup-window", "dedup_window_ms", &t.DedupWindowMs, true},
		{"jitter", "jitter_ms", &t.JitterMs, true},
		{"backoff-base", "backoff_base_ms", &t.BackoffBaseMs, false},
		{"backoff-max", "backoff_max_ms", &t.BackoffMaxMs, false},
	}
	for _, d := range durations {
		if !c.IsSet(d.flag) {
			continue
		}
		v := c.Duration(d.flag)
		if v < 0 || (!d.zeroOK && v < time.Millisecond) || (v > 0 && v < time.Millisecond) {
			want := "at least 1ms"
			if d.zeroOK {
				want = "0 or at least 1ms"
			}
			return nil, usagef("--%s %v: want %s", d.flag, v, want)
		}
		*d.dst = v.Milliseconds()
		req.UpdateMask = append(req.UpdateMask, d.field)
	}
	if c.IsSet("max-attempts") {
		n := c.Int("max-attempts")
		if n < 1 || n > 1<<20 {
			return nil, usagef("--max-attempts %d: want 1 or more", n)
		}
		t.MaxAttempts = int32(n)
		req.UpdateMask = append(req.UpdateMask, "max_attempts")
	}
	if c.IsSet("max-message-bytes") {
		n := c.Int64("max-message-bytes")
		if n < 1 {
			return nil, usagef("--max-message-bytes %d: want 1 or more", n)
		}
		t.MaxMessageBytes = n
		req.UpdateMask = append(req.UpdateMask, "max_message_bytes")
	}
	if c.IsSet("release-rate") {
		r := c.Float64("release-rate")
		if r < 0 {
			return nil, usagef("--release-rate %v: want 0 (unlimited) or more", r)
		}
		t.ReleaseRatePerSec = r
		req.UpdateMask = append(req.UpdateMask, "release_rate_per_sec")
	}
	if c.IsSet("weight") {
		w, err := parseWeights(c.StringSlice("weight"))
		if err != nil {
			return nil, err
		}
		t.FairnessWeights = w
		req.UpdateMask = append(req.UpdateMask, "fairness_weights")
	}
	if len(req.UpdateMask) == 0 {
		return nil, usagef("topics update: nothing to change: give at least one setting flag")
	}
	return req, nil
}

func runTopicsUpdate(ctx context.Context, c *cli.Context, e *env) error {
	req, err := topicUpdateFromFlags(c)
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		t, err := cl.Admin().UpdateTopic(ctx, req)
		if err != nil {
			return &opError{op: "topics update " + req.GetTopic().GetName(), err: err}
		}
		return renderTopic(e.stdout, e.output, t)
	})
}

func runTopicsDelete(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("topics delete takes exactly one NAME, got %d arguments", c.Args().Len())
	}
	name := c.Args().First()
	if err := confirm(c, e, fmt.Sprintf("delete topic %s and all its messages", name)); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.Admin().DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: name}); err != nil {
			return &opError{op: "topics delete " + name, err: err}
		}
		return renderDone(e.stdout, e.output, map[string]any{"deleted": name})
	})
}

func runTopicsPurge(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("topics purge takes exactly one NAME, got %d arguments", c.Args().Len())
	}
	name, group := c.Args().First(), c.String("group")
	what := "purge every pending message of topic " + name
	if group != "" {
		what = fmt.Sprintf("purge the pending messages of group %s of topic %s", group, name)
	}
	if err := confirm(c, e, what); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Admin().PurgeTopic(ctx, &sundialv1.PurgeTopicRequest{Name: name, Group: group})
		if err != nil {
			return &opError{op: "topics purge " + name, err: err}
		}
		return renderDone(e.stdout, e.output, map[string]any{"topic": name, "purged": resp.GetPurged()})
	})
}

// renderDone prints the small result of a write: "key: value" lines in
// table mode.
func renderDone(w io.Writer, format string, v map[string]any) error {
	return render(w, format, v, func(w io.Writer) {
		for _, k := range sortedKeys(v) {
			fmt.Fprintf(w, "%s: %v\n", k, v[k])
		}
	})
}
