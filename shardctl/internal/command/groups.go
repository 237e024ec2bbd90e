package command

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func topicFlag() cli.Flag {
	return &cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "the topic (required)"}
}

func groupsCommands(act func(func(context.Context, *cli.Context, *env) error) cli.ActionFunc, cmd func(*cli.Command) *cli.Command) []*cli.Command {
	return []*cli.Command{
		cmd(&cli.Command{
			Name:      "create",
			Usage:     "create a consumer group: it gets a copy of every message published from now on",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{topicFlag(), &cli.BoolFlag{Name: "if-not-exists", Usage: "succeed when the group already exists"}},
			Action:    act(runGroupsCreate),
		}),
		cmd(&cli.Command{
			Name:   "list",
			Usage:  "list the groups of a topic with their stats",
			Flags:  []cli.Flag{topicFlag()},
			Action: act(runGroupsList),
		}),
		cmd(&cli.Command{
			Name:      "delete",
			Usage:     "delete a consumer group and its pending copies",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{topicFlag(), yesFlag()},
			Action:    act(runGroupsDelete),
		}),
	}
}

// topicAndName checks --topic and one NAME argument.
func topicAndName(c *cli.Context, cmd string) (string, string, error) {
	if c.String("topic") == "" {
		return "", "", usagef("--topic is required")
	}
	if c.Args().Len() != 1 {
		return "", "", usagef("%s takes exactly one NAME, got %d arguments", cmd, c.Args().Len())
	}
	return c.String("topic"), c.Args().First(), nil
}

func runGroupsCreate(ctx context.Context, c *cli.Context, e *env) error {
	topic, name, err := topicAndName(c, "groups create")
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		g, err := cl.Admin().CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: topic, Group: name, IfNotExists: c.Bool("if-not-exists")})
		if err != nil {
			return &opError{op: fmt.Sprintf("groups create %s", name), err: err}
		}
		return renderGroups(e.stdout, e.output, []*sundialv1.Group{g})
	})
}

func runGroupsList(ctx context.Context, c *cli.Context, e *env) error {
	if c.String("topic") == "" {
		return usagef("--topic is required")
	}
	if c.Args().Len() > 0 {
		return usagef("groups list takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Admin().ListGroups(ctx, &sundialv1.ListGroupsRequest{Topic: c.String("topic")})
		if err != nil {
			return &opError{op: "groups list", err: err}
		}
		return renderGroups(e.stdout, e.output, resp.GetGroups())
	})
}

func runGroupsDelete(ctx context.Context, c *cli.Context, e *env) error {
	topic, name, err := topicAndName(c, "groups delete")
	if err != nil {
		return err
	}
	if err := confirm(c, e, fmt.Sprintf("delete group %s of topic %s and its pending copies", name, topic)); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.Admin().DeleteGroup(ctx, &sundialv1.DeleteGroupRequest{Topic: topic, Group: name}); err != nil {
			return &opError{op: "groups delete " + name, err: err}
		}
		return renderDone(e.stdout, e.output, map[string]any{"topic": topic, "deleted": name})
	})
}

// groupView is the rendered form of a Group.
type groupView struct {
	Topic string          `json:"topic" yaml:"topic"`
	Name  string          `json:"name" yaml:"name"`
	Stats *groupStatsView `json:"stats,omitempty" yaml:"stats,omitempty"`
}

func renderGroups(w io.Writer, format string, groups []*sundialv1.Group) error {
	views := make([]groupView, 0, len(groups))
	for _, g := range groups {
		v := groupView{Topic: g.GetTopic(), Name: g.GetName()}
		if g.GetStats() != nil {
			s := newGroupStatsView(g.GetStats())
			s.Group = g.GetName()
			v.Stats = &s
		}
		views = append(views, v)
	}
	return render(w, format, views, func(w io.Writer) {
		t := newTable(w, append([]any{"TOPIC"}, statsHeader...)...)
		for _, v := range views {
			s := groupStatsView{Group: v.Name}
			if v.Stats != nil {
				s = *v.Stats
			}
			t.AppendRow(append([]any{v.Topic}, statsRow(s)...))
		}
		t.Render()
	})
}
