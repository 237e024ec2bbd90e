package command

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// yesFlag is the confirmation flag of destructive commands.
func yesFlag() cli.Flag {
	return &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do it without asking (required when stdin is not a terminal)"}
}

// isTerminal reports whether r is an interactive terminal (a character
// device such as /dev/null is not).
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) //nolint:gosec // a file descriptor fits an int
}

// confirm asks before a destructive action: --yes goes ahead; without it a
// terminal is asked to type "yes", and anything else is a usage error
// (exit 2, nothing done).
func confirm(c *cli.Context, e *env, what string) error {
	if c.Bool("yes") {
		return nil
	}
	if !isTerminal(e.stdin) {
		return usagef("%s is destructive: pass --yes to confirm (stdin is not a terminal)", what)
	}
	fmt.Fprintf(e.stderr, "%s? type yes to confirm: ", what)
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return &silentError{msg: "not confirmed; nothing done"}
	}
	return nil
}

// parseWhen parses an RFC 3339 time, "now", or "now+D"/"now-D" with a Go
// duration D, relative to now.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if rest, ok := strings.CutPrefix(s, "now"); ok {
		if rest == "" {
			return now, nil
		}
		d, err := time.ParseDuration(rest)
		if err != nil || (rest[0] != '+' && rest[0] != '-') {
			return time.Time{}, usagef("--%s %q: want now, now+DURATION, now-DURATION or an RFC 3339 time", flag, s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--%s %q: want now, now+DURATION, now-DURATION or an RFC 3339 time such as 2030-01-02T15:04:05Z", flag, s)
	}
	return t, nil
}

// whenMs is parseWhen of an optional flag in unix milliseconds (0 when not
// given).
func whenMs(c *cli.Context, flag string, now time.Time) (int64, error) {
	if !c.IsSet(flag) {
		return 0, nil
	}
	t, err := parseWhen(flag, c.String(flag), now)
	if err != nil {
		return 0, err
	}
	if t.UnixMilli() <= 0 {
		return 0, usagef("--%s %q: before 1970", flag, c.String(flag))
	}
	return t.UnixMilli(), nil
}

// selectorFlags name one message by key or id.
func selectorFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "topic", Aliases: []string{"t"}, Usage: "topic of the message (required)"},
		&cli.StringFlag{Name: "key", Usage: "the message's key"},
		&cli.StringFlag{Name: "id", Usage: "the message's id"},
	}
}

// changeFlags are the flags of cancel and reschedule: the selector and
// the request id that makes a retried command answer the first outcome.
func changeFlags() []cli.Flag {
	return append(selectorFlags(), &cli.StringFlag{Name: "request-id", Usage: "request id `ID` (default: a new one): running the command again with it answers the first outcome and changes nothing"})
}

// changeOptions passes --request-id, when given, to the client call.
func changeOptions(c *cli.Context) []client.ChangeOption {
	if id := c.String("request-id"); id != "" {
		return []client.ChangeOption{client.WithRequestID(id)}
	}
	return nil
}

// selectorFromFlags builds the selector of --topic and exactly one of
// --key and --id.
func selectorFromFlags(c *cli.Context, cmd string) (*sundialv1.MessageSelector, error) {
	if c.Args().Len() > 0 {
		return nil, usagef("%s takes no arguments, got %q", cmd, c.Args().Slice())
	}
	topic := c.String("topic")
	if topic == "" {
		return nil, usagef("--topic is required")
	}
	key, id := c.String("key"), c.String("id")
	switch {
	case key != "" && id != "":
		return nil, usagef("--key and --id are mutually exclusive: give one")
	case key != "":
		return client.ByKey(topic, key), nil
	case id != "":
		return client.ByID(topic, id), nil
	}
	return nil, usagef("%s needs the message: give --key or --id", cmd)
}

// call dials the proxy and runs f with a context bounded by --timeout.
func call(ctx context.Context, e *env, f func(context.Context, *client.Client) error) error {
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return f(ctx, cl)
}

// parseWeights parses repeated key=N flags with N > 0.
func parseWeights(kvs []string) (map[string]int32, error) {
	out := make(map[string]int32, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--weight %q: want key=N", kv)
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			return nil, usagef("--weight %q: want a positive whole weight", kv)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("--weight %q: key %q given twice", kv, k)
		}
		out[k] = int32(n)
	}
	return out, nil
}
