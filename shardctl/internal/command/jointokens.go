package command

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Bounds of join-token create's flags (the broker checks them too).
const (
	maxJoinTokenExpires = time.Duration(validate.MaxJoinTokenExpiresInMs) * time.Millisecond
	maxJoinTokenUses    = validate.MaxJoinTokenUses
)

func joinTokenCommands(plain func(func(context.Context, *cli.Context, *env) error) cli.ActionFunc, leaf func(*cli.Command) *cli.Command) []*cli.Command {
	return []*cli.Command{
		leaf(&cli.Command{
			Name:  "create",
			Usage: "make a token that admits brokers to the cluster (--join-token-file); the secret is printed once",
			Description: "The token admits --uses brokers (default 1) until --expires has passed (default 1h).\n" +
				"Only its SHA-256 is stored: keep the printed secret in the joining broker's --join-token-file.",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "expires", Value: time.Hour, Usage: "how long the token admits joins, at most 720h"},
				&cli.IntFlag{Name: "uses", Value: 1, Usage: fmt.Sprintf("how many brokers it admits, 1..%d", maxJoinTokenUses)},
			},
			Action: plain(runJoinTokenCreate),
		}),
		leaf(&cli.Command{
			Name:   "list",
			Usage:  "list the join tokens (never their secrets): expiry, uses, the nodes each admitted",
			Action: plain(runJoinTokenList),
		}),
		leaf(&cli.Command{
			Name:      "revoke",
			Usage:     "delete a join token: it admits no broker from now on",
			ArgsUsage: "ID",
			Action:    plain(runJoinTokenRevoke),
		}),
	}
}

// joinTokenView is one token as shardctl shows it.
type joinTokenView struct {
	ID        string    `json:"id" yaml:"id"`
	CreatedAt time.Time `json:"created_at" yaml:"created_at"`
	ExpiresAt time.Time `json:"expires_at" yaml:"expires_at"`
	Uses      uint32    `json:"uses" yaml:"uses"`
	NodeIDs   []uint64  `json:"node_ids" yaml:"node_ids"`
	State     string    `json:"state" yaml:"state"` // usable, expired or spent
	// Secret is set only in create's answer.
	Secret string `json:"secret,omitempty" yaml:"secret,omitempty"`
}

func newJoinTokenView(t *sundialv1.JoinToken) joinTokenView {
	v := joinTokenView{
		ID: t.GetId(), CreatedAt: time.UnixMilli(t.GetCreatedAtMs()).UTC(), ExpiresAt: time.UnixMilli(t.GetExpiresAtMs()).UTC(),
		Uses: t.GetUses(), NodeIDs: append([]uint64{}, t.GetNodeIds()...), State: "usable",
	}
	switch {
	case t.GetExpired():
		v.State = "expired"
	case t.GetSpent():
		v.State = "spent"
	}
	return v
}

func renderJoinTokens(w io.Writer, format string, vs []joinTokenView) error {
	return render(w, format, vs, func(w io.Writer) {
		t := newTable(w, "ID", "CREATED", "EXPIRES", "USED", "STATE")
		for _, v := range vs {
			t.AppendRow([]any{v.ID, v.CreatedAt.Format(time.RFC3339), v.ExpiresAt.Format(time.RFC3339), fmt.Sprintf("%d/%d", len(v.NodeIDs), v.Uses), v.State})
		}
		t.Render()
	})
}

func runJoinTokenCreate(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("join-token create takes no arguments, got %q", c.Args().Slice())
	}
	expires, uses := c.Duration("expires"), c.Int("uses")
	if expires < time.Second || expires > maxJoinTokenExpires {
		return usagef("--expires %s: want a duration from 1s to %s", expires, maxJoinTokenExpires)
	}
	if uses < 1 || uses > maxJoinTokenUses {
		return usagef("--uses %d: want a whole number from 1 to %d", uses, maxJoinTokenUses)
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().CreateJoinToken(ctx, &sundialv1.CreateJoinTokenRequest{ExpiresInMs: expires.Milliseconds(), Uses: uint32(uses)})
		if err != nil {
			return &opError{op: "join-token create", err: err}
		}
		v := newJoinTokenView(resp.GetToken())
		v.Secret = resp.GetSecret()
		return render(e.stdout, e.output, v, func(w io.Writer) {
			fmt.Fprintln(w, v.Secret)
			fmt.Fprintf(e.stderr, "join token %s: admits %d broker(s) until %s; the secret above is not shown again.\n"+
				"Write it to a file and start the joining broker with --join-token-file FILE.\n", v.ID, v.Uses, v.ExpiresAt.Format(time.RFC3339))
		})
	})
}

func runJoinTokenList(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("join-token list takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := cl.Cluster().ListJoinTokens(ctx, &sundialv1.ListJoinTokensRequest{})
		if err != nil {
			return &opError{op: "join-token list", err: err}
		}
		vs := []joinTokenView{}
		for _, t := range resp.GetTokens() {
			vs = append(vs, newJoinTokenView(t))
		}
		return renderJoinTokens(e.stdout, e.output, vs)
	})
}

func runJoinTokenRevoke(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 || c.Args().First() == "" {
		return usagef("join-token revoke takes one argument, the token's ID (join-token list shows them), got %q", c.Args().Slice())
	}
	id := c.Args().First()
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.Cluster().RevokeJoinToken(ctx, &sundialv1.RevokeJoinTokenRequest{Id: id}); err != nil {
			return &opError{op: "join-token revoke " + id, err: err}
		}
		fmt.Fprintf(e.stdout, "join token %s revoked\n", id)
		return nil
	})
}
