// Package command implements shardctl, Sundial's operator CLI: the command
// tree, flag validation, rendering (table, JSON, YAML) and the mapping of
// errors onto exit codes.
//
// Data goes to stdout; progress, prompts and errors go to stderr. Exit codes:
// 0 success, 1 failure (the server said no, a message failed, a timeout), 2
// usage error (bad flags or arguments; nothing was sent).
//
// Global flags (--proxy, -o/--output, --timeout) are accepted both before
// and after the subcommand name; the TLS flags (--cacert, --cert, --key, or
// SUNDIAL_CACERT, SUNDIAL_CERT, SUNDIAL_KEY) and --token-file (or the token
// itself in SUNDIAL_TOKEN) only before it. Run builds a fresh command tree per call;
// nothing here holds state between calls, so tests run it in-process.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sundialmq/sundial/proto/client"
	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// usageError is a mistake in the command line: exit 2, nothing sent.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// silentError is a failure already reported on stderr: exit 1.
type silentError struct{ msg string }

func (e *silentError) Error() string { return e.msg }

// opError is a failed call of operation op: exit 1, printed with the
// status message and field violations.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// env is what every command needs: where and how to talk, and where to write.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	proxy          string
	output         string
	timeout        time.Duration
	tls            tlsfiles.Files // --cacert, --cert, --key; none: plaintext
	token          string         // --token-file's content or SUNDIAL_TOKEN; "" for none
}

// dial connects to the proxy.
func (e *env) dial(ctx context.Context) (*client.Client, error) {
	var opts []client.Option
	if e.tls.Enabled() {
		opts = append(opts, client.WithTLSFiles(e.tls))
	}
	if e.token != "" {
		opts = append(opts, client.WithToken(e.token))
	}
	return client.Dial(ctx, []string{e.proxy}, opts...)
}

// credentials are the transport credentials of a direct call to a broker
// (add-node): TLS with the same files when given, else plaintext.
func (e *env) credentials() (credentials.TransportCredentials, error) {
	if !e.tls.Enabled() {
		return insecure.NewCredentials(), nil
	}
	src, err := tlsfiles.New("client", e.tls, 0, nil, nil)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(src.ClientConfig()), nil
}

const (
	flagProxy   = "proxy"
	flagOutput  = "output"
	flagTimeout = "timeout"
	flagCACert  = "cacert"
	flagCert    = "cert"
	flagKey     = "key"
	flagToken   = "token-file"
)

// globalFlags builds the global flags; withTimeout is false for commands
// that define their own --timeout.
func globalFlags(root, withTimeout bool) []cli.Flag {
	proxy := &cli.StringFlag{Name: flagProxy, Value: client.DefaultAddr, Usage: "proxy gRPC address (host:port, comma-separated for several)"}
	if root {
		proxy.EnvVars = []string{"SUNDIAL_PROXY"}
	}
	fs := []cli.Flag{
		proxy,
		&cli.StringFlag{Name: flagOutput, Aliases: []string{"o"}, Value: "table", Usage: "output format: table, json or yaml"},
	}
	if root {
		// Before the command only: publish has a --key of its own.
		fs = append(fs,
			&cli.StringFlag{Name: flagCACert, EnvVars: []string{"SUNDIAL_CACERT"}, Usage: "PEM CA file to verify the proxy's TLS certificate against (turns TLS on)"},
			&cli.StringFlag{Name: flagCert, EnvVars: []string{"SUNDIAL_CERT"}, Usage: "PEM client certificate file, for a proxy that requires one (turns TLS on)"},
			&cli.StringFlag{Name: flagKey, EnvVars: []string{"SUNDIAL_KEY"}, Usage: "PEM key file of --cert"},
			&cli.StringFlag{Name: flagToken, Usage: "file holding the bearer token to send (else the token in SUNDIAL_TOKEN), for a proxy with authentication on"})
	}
	if withTimeout {
		fs = append(fs, &cli.DurationFlag{Name: flagTimeout, Value: 10 * time.Second, Usage: "deadline of each request"})
	}
	return fs
}

// lookup returns the value of a global flag from the innermost command
// context that set it, else from the root (which carries the defaults and
// SUNDIAL_PROXY). skip leaves out the innermost contexts, for commands that
// shadow a global flag with their own meaning.
func lookup[T any](c *cli.Context, name string, skip int, get func(*cli.Context, string) T) T {
	var root *cli.Context
	for i, lc := range c.Lineage() {
		if lc.Command == nil {
			continue
		}
		root = lc
		if i >= skip && slices.Contains(lc.LocalFlagNames(), name) {
			return get(lc, name)
		}
	}
	if root == nil {
		root = c
	}
	return get(root, name)
}

func newEnv(c *cli.Context, stdin io.Reader, stdout, stderr io.Writer, ownTimeout bool) (*env, error) {
	e := &env{
		stdin:  stdin,
		stdout: stdout,
		stderr: stderr,
		proxy:  lookup(c, flagProxy, 0, (*cli.Context).String),
		output: lookup(c, flagOutput, 0, (*cli.Context).String),
		// The root's TLS flags: a command's own --key is another flag.
		tls: tlsfiles.Files{
			CAFile:   lookup(c, flagCACert, math.MaxInt, (*cli.Context).String),
			CertFile: lookup(c, flagCert, math.MaxInt, (*cli.Context).String),
			KeyFile:  lookup(c, flagKey, math.MaxInt, (*cli.Context).String),
		},
	}
	tok, err := readToken(lookup(c, flagToken, math.MaxInt, (*cli.Context).String), os.Getenv("SUNDIAL_TOKEN"))
	if err != nil {
		return nil, err
	}
	e.token = tok
	skip := 0
	if ownTimeout {
		skip = 1
	}
	e.timeout = lookup(c, flagTimeout, skip, (*cli.Context).Duration)
	switch e.output {
	case "table", "json", "yaml":
	default:
		return nil, usagef("-o/--output %q: want table, json or yaml", e.output)
	}
	if e.proxy == "" {
		return nil, usagef("--proxy is empty: give the proxy address, e.g. %s", client.DefaultAddr)
	}
	if (e.tls.CertFile == "") != (e.tls.KeyFile == "") {
		return nil, usagef("--cert and --key: give both or neither")
	}
	if e.timeout <= 0 {
		return nil, usagef("--timeout %v: want a positive duration", e.timeout)
	}
	return e, nil
}

// Run runs shardctl with args (args[0] is the program name) and returns the
// exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	err := app.RunContext(ctx, reorder(app, args))
	return report(stderr, err)
}

// newApp builds the command tree.
func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	act := func(ownTimeout bool, f func(context.Context, *cli.Context, *env) error) cli.ActionFunc {
		return func(c *cli.Context) error {
			e, err := newEnv(c, stdin, stdout, stderr, ownTimeout)
			if err != nil {
				return err
			}
			return f(c.Context, c, e)
		}
	}
	onUsage := func(_ *cli.Context, err error, _ bool) error { return &usageError{msg: err.Error()} }
	cmd := func(cm *cli.Command, ownTimeout bool) *cli.Command {
		cm.Flags = append(cm.Flags, globalFlags(false, !ownTimeout)...)
		cm.OnUsageError = onUsage
		return cm
	}

	plain := func(f func(context.Context, *cli.Context, *env) error) cli.ActionFunc { return act(false, f) }
	leaf := func(cm *cli.Command) *cli.Command { return cmd(cm, false) }
	group := func(name, usage string, subs ...*cli.Command) *cli.Command {
		return &cli.Command{Name: name, Usage: usage, HideHelpCommand: true, OnUsageError: onUsage, Action: notFound, Subcommands: subs}
	}

	return &cli.App{
		Name:                      "shardctl",
		Usage:                     "operate a Sundial cluster",
		Reader:                    stdin,
		Writer:                    stdout,
		ErrWriter:                 stderr,
		Flags:                     globalFlags(true, true),
		OnUsageError:              onUsage,
		ExitErrHandler:            func(*cli.Context, error) {},
		DisableSliceFlagSeparator: true,
		HideHelpCommand:           true,
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("unknown command %q: run 'shardctl --help' for the list", c.Args().First())
			}
			_ = cli.ShowAppHelp(c)
			return usagef("missing command")
		},
		Commands: []*cli.Command{
			cmd(&cli.Command{
				Name:   "status",
				Usage:  "show nodes (state, when the meta leader last heard from them, labels, replicas, leaders), shards (replicas, leader) and operations in progress; -o json for scripts",
				Action: act(false, runStatus),
			}, false),
			{
				Name:            "topics",
				Usage:           "create, list and inspect topics",
				HideHelpCommand: true,
				OnUsageError:    onUsage,
				Action:          notFound,
				Subcommands: []*cli.Command{
					cmd(topicsCreateCommand(act(false, runTopicsCreate)), false),
					cmd(&cli.Command{
						Name:   "list",
						Usage:  "list topics",
						Flags:  []cli.Flag{&cli.StringFlag{Name: "prefix", Usage: "only topics whose name starts with `P`"}},
						Action: act(false, runTopicsList),
					}, false),
					cmd(&cli.Command{
						Name:      "get",
						Usage:     "show one topic with per-group stats",
						ArgsUsage: "NAME",
						Action:    act(false, runTopicsGet),
					}, false),
					cmd(topicsUpdateCommand(act(false, runTopicsUpdate)), false),
					cmd(&cli.Command{
						Name:      "delete",
						Usage:     "delete a topic and all its messages",
						ArgsUsage: "NAME",
						Flags:     []cli.Flag{yesFlag()},
						Action:    act(false, runTopicsDelete),
					}, false),
					cmd(&cli.Command{
						Name:      "purge",
						Usage:     "drop the pending messages of a topic, or of one group",
						ArgsUsage: "NAME",
						Flags:     []cli.Flag{&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "only this group's copies"}, yesFlag()},
						Action:    act(false, runTopicsPurge),
					}, false),
				},
			},
			group("groups", "create, list and delete consumer groups", groupsCommands(plain, leaf)...),
			group("messages", "inspect scheduled messages", []*cli.Command{
				leaf(&cli.Command{Name: "list", Usage: "list scheduled messages by due time, key prefix or header", Flags: listFlags(), Action: plain(runMessagesList)}),
				leaf(&cli.Command{Name: "get", Usage: "show one message by key or id, with its copies per group", Flags: selectorFlags(), Action: plain(runMessagesGet)}),
				leaf(&cli.Command{Name: "histogram", Usage: "count upcoming due times per minute or hour", Flags: []cli.Flag{
					topicFlag(),
					&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "whose copies to count (default: default)"},
					&cli.StringFlag{Name: "bucket", Value: "minute", Usage: "minute or hour"},
					&cli.StringFlag{Name: "from", Usage: "first bucket at `T` (default now): RFC 3339, now, now+10m"},
					&cli.StringFlag{Name: "to", Usage: "end at `T` (default: 60 buckets)"},
				}, Action: plain(runMessagesHistogram)}),
			}...),
			group("dlq", "list and redrive dead letters (<topic>.dlq)", []*cli.Command{
				leaf(&cli.Command{Name: "list", Usage: "list the dead letters of a topic", Flags: listFlags(), Action: plain(runDLQList)}),
				leaf(&cli.Command{Name: "redrive", Usage: "move dead letters back to their topic", Flags: []cli.Flag{
					topicFlag(),
					&cli.Int64Flag{Name: "max", Usage: "move at most this many (0: all)"},
					yesFlag(),
				}, Action: plain(runDLQRedrive)}),
			}...),
			leaf(&cli.Command{Name: "cancel", Usage: "cancel a pending message; prints done, in_flight, already_delivered or not_found", Flags: changeFlags(), Action: plain(runCancel)}),
			leaf(rescheduleCommand(plain(runReschedule))),
			cmd(publishCommand(act(false, runPublish)), false),
			cmd(consumeCommand(act(true, runConsume)), true),
			leaf(receiveCommand(plain(runReceive))),
			leaf(transferLeaderCommand(plain(runTransferLeader))),
			leaf(addNodeCommand(plain(runAddNode))),
			leaf(rebalanceCommand(plain(runRebalance))),
			operationsCommand(leaf, plain(runOperations), plain(runOperationsCancel)),
			leaf(drainNodeCommand(plain(runDrainNode))),
			leaf(removeNodeCommand(plain(runRemoveNode))),
			group("shards", "add and list event shards", shardsCommands(plain, leaf)...),
			group("join-token", "create, list and revoke the tokens that admit brokers to the cluster", joinTokenCommands(plain, leaf)...),
			group("auth", "tokens, roles and the receipt key (docs/security.md)", authCommands(plain, leaf)...),
			group("backup", "back up the cluster to files or S3; list, verify, delete and restore backups (docs/operations.md, Backups)", backupCommands(plain, leaf)...),
		},
	}
}

// notFound is the action of a command group: its help and a usage error
// when no subcommand, or an unknown one, is given.
func notFound(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usagef("unknown command %q: run '%s --help' for the list", c.Args().First(), c.Command.HelpName)
	}
	_ = cli.ShowSubcommandHelp(c)
	return usagef("missing command")
}

// report prints err for the operator and returns the exit code.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "shardctl: %s\n", ue.msg)
		return ExitUsage
	}
	var se *silentError
	if errors.As(err, &se) {
		if se.msg != "" {
			fmt.Fprintf(stderr, "shardctl: %s\n", se.msg)
		}
		return ExitFailure
	}
	var oe *opError
	if errors.As(err, &oe) {
		printError(stderr, "shardctl: "+oe.op+": ", oe.err)
		return ExitFailure
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if ec.Error() != "" {
			fmt.Fprintf(stderr, "shardctl: %s\n", ec.Error())
		}
		if ec.ExitCode() == 3 { // urfave's "no help topic": a usage mistake
			return ExitUsage
		}
		return ExitFailure
	}
	printError(stderr, "shardctl: ", err)
	return ExitFailure
}
