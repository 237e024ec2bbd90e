package command

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// readToken reads --token-file (trimmed); SUNDIAL_TOKEN is the token
// itself. "" when neither is set.
func readToken(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("--token-file: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usagef("--token-file %s is empty", file)
	}
	return t, nil
}

func authCommands(act func(func(context.Context, *cli.Context, *env) error) cli.ActionFunc, cmd func(*cli.Command) *cli.Command) []*cli.Command {
	token := &cli.Command{Name: "token", Usage: "create, list and revoke bearer tokens", HideHelpCommand: true, Subcommands: []*cli.Command{
		cmd(&cli.Command{
			Name:      "create",
			Usage:     "create a token; its secret is printed once (keep it: the cluster stores only its hash)",
			ArgsUsage: "NAME",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "role", Usage: "the token's role: admin or one made by 'auth role create' (required)"},
				&cli.DurationFlag{Name: "expires", Usage: "lifetime, e.g. 720h (default: never expires)"},
			},
			Action: act(runTokenCreate),
		}),
		cmd(&cli.Command{Name: "list", Usage: "list tokens (no secrets)", Action: act(runTokenList)}),
		cmd(&cli.Command{Name: "revoke", Usage: "revoke a token: every proxy refuses it within a second and ends its streams", ArgsUsage: "NAME", Action: act(runTokenRevoke)}),
	}}
	role := &cli.Command{Name: "role", Usage: "create, list and delete roles", HideHelpCommand: true, Subcommands: []*cli.Command{
		cmd(&cli.Command{
			Name:      "create",
			Usage:     "create a role of grants PERMISSION:PATTERN (publish, consume, inspect, manage, admin on '*', 'prefix*' or a topic)",
			ArgsUsage: "NAME",
			Flags:     []cli.Flag{&cli.StringSliceFlag{Name: "grant", Usage: "a grant, e.g. publish:demo* (repeat; permissions may be joined: publish,consume:demo*)"}},
			Action:    act(runRoleCreate),
		}),
		cmd(&cli.Command{Name: "list", Usage: "list roles with their grants", Action: act(runRoleList)}),
		cmd(&cli.Command{Name: "delete", Usage: "delete a role no token names", ArgsUsage: "NAME", Action: act(runRoleDelete)}),
	}}
	rotate := cmd(&cli.Command{Name: "rotate-receipt-key", Usage: "make a new receipt-signing key; receipts of the previous key stay valid until the next rotation", Action: act(runRotateReceiptKey)})
	return []*cli.Command{token, role, rotate}
}

func oneName(c *cli.Context, cmd string) (string, error) {
	if c.Args().Len() != 1 {
		return "", usagef("%s takes exactly one NAME, got %d arguments", cmd, c.Args().Len())
	}
	return c.Args().First(), nil
}

func runTokenCreate(ctx context.Context, c *cli.Context, e *env) error {
	name, err := oneName(c, "auth token create")
	if err != nil {
		return err
	}
	if c.String("role") == "" {
		return usagef("--role is required: admin or a role made by 'auth role create'")
	}
	exp := c.Duration("expires")
	if exp < 0 || (exp > 0 && exp < time.Second) {
		return usagef("--expires %v: want a positive duration of at least 1s (e.g. 720h), or none for a token that never expires", exp)
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := sundialv1.NewAuthClient(cl.Conn()).CreateToken(ctx, &sundialv1.CreateTokenRequest{Name: name, Role: c.String("role"), ExpiresInSeconds: int64(exp / time.Second)})
		if err != nil {
			return &opError{op: "auth token create " + name, err: err}
		}
		v := map[string]any{"name": resp.GetToken().GetName(), "role": resp.GetToken().GetRole(), "expires": expiry(resp.GetToken().GetExpiresAtMs()), "secret": resp.GetSecret()}
		return render(e.stdout, e.output, v, func(w io.Writer) {
			fmt.Fprintf(w, "token %s (role %s, expires %s)\n", name, resp.GetToken().GetRole(), expiry(resp.GetToken().GetExpiresAtMs()))
			fmt.Fprintf(w, "secret (shown only now): %s\n", resp.GetSecret())
		})
	})
}

func expiry(ms int64) string {
	if ms == 0 {
		return "never"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func runTokenList(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("auth token list takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := sundialv1.NewAuthClient(cl.Conn()).ListTokens(ctx, &sundialv1.ListTokensRequest{})
		if err != nil {
			return &opError{op: "auth token list", err: err}
		}
		type row struct {
			Name    string `json:"name" yaml:"name"`
			Role    string `json:"role" yaml:"role"`
			Created string `json:"created" yaml:"created"`
			Expires string `json:"expires" yaml:"expires"`
		}
		rows := []row{}
		for _, t := range resp.GetTokens() {
			rows = append(rows, row{t.GetName(), t.GetRole(), time.UnixMilli(t.GetCreatedAtMs()).UTC().Format(time.RFC3339), expiry(t.GetExpiresAtMs())})
		}
		return render(e.stdout, e.output, rows, func(w io.Writer) {
			t := newTable(w, "NAME", "ROLE", "CREATED", "EXPIRES")
			for _, r := range rows {
				t.AppendRow([]any{r.Name, r.Role, r.Created, r.Expires})
			}
			t.Render()
		})
	})
}

func runTokenRevoke(ctx context.Context, c *cli.Context, e *env) error {
	name, err := oneName(c, "auth token revoke")
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		if _, err := sundialv1.NewAuthClient(cl.Conn()).RevokeToken(ctx, &sundialv1.RevokeTokenRequest{Name: name}); err != nil {
			return &opError{op: "auth token revoke " + name, err: err}
		}
		fmt.Fprintf(e.stdout, "token %s revoked\n", name)
		return nil
	})
}

// parseGrants parses --grant values: PERMS:PATTERN, PERMS joined by ','.
func parseGrants(vals []string) ([]*sundialv1.Grant, error) {
	var out []*sundialv1.Grant
	for _, v := range vals {
		perms, pattern, ok := strings.Cut(v, ":")
		if !ok || perms == "" || pattern == "" {
			return nil, usagef("--grant %q: want PERMISSION:PATTERN, e.g. publish:demo*", v)
		}
		for _, p := range strings.Split(perms, ",") {
			out = append(out, &sundialv1.Grant{Permission: strings.TrimSpace(p), Pattern: pattern})
		}
	}
	if len(out) == 0 {
		return nil, usagef("--grant is required at least once, e.g. --grant publish,consume:demo*")
	}
	return out, nil
}

func runRoleCreate(ctx context.Context, c *cli.Context, e *env) error {
	name, err := oneName(c, "auth role create")
	if err != nil {
		return err
	}
	grants, err := parseGrants(c.StringSlice("grant"))
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		r, err := sundialv1.NewAuthClient(cl.Conn()).CreateRole(ctx, &sundialv1.CreateRoleRequest{Name: name, Grants: grants})
		if err != nil {
			return &opError{op: "auth role create " + name, err: err}
		}
		return renderRoles(e, []*sundialv1.Role{r})
	})
}

func renderRoles(e *env, roles []*sundialv1.Role) error {
	type row struct {
		Name   string   `json:"name" yaml:"name"`
		Grants []string `json:"grants" yaml:"grants"`
	}
	rows := []row{}
	for _, r := range roles {
		var gs []string
		for _, g := range r.GetGrants() {
			gs = append(gs, g.GetPermission()+":"+g.GetPattern())
		}
		rows = append(rows, row{r.GetName(), gs})
	}
	return render(e.stdout, e.output, rows, func(w io.Writer) {
		t := newTable(w, "NAME", "GRANTS")
		for _, r := range rows {
			t.AppendRow([]any{r.Name, strings.Join(r.Grants, " ")})
		}
		t.Render()
	})
}

func runRoleList(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("auth role list takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := sundialv1.NewAuthClient(cl.Conn()).ListRoles(ctx, &sundialv1.ListRolesRequest{})
		if err != nil {
			return &opError{op: "auth role list", err: err}
		}
		return renderRoles(e, resp.GetRoles())
	})
}

func runRoleDelete(ctx context.Context, c *cli.Context, e *env) error {
	name, err := oneName(c, "auth role delete")
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		if _, err := sundialv1.NewAuthClient(cl.Conn()).DeleteRole(ctx, &sundialv1.DeleteRoleRequest{Name: name}); err != nil {
			return &opError{op: "auth role delete " + name, err: err}
		}
		fmt.Fprintf(e.stdout, "role %s deleted\n", name)
		return nil
	})
}

func runRotateReceiptKey(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("auth rotate-receipt-key takes no arguments, got %q", c.Args().Slice())
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := sundialv1.NewAuthClient(cl.Conn()).RotateReceiptKey(ctx, &sundialv1.RotateReceiptKeyRequest{})
		if err != nil {
			return &opError{op: "auth rotate-receipt-key", err: err}
		}
		fmt.Fprintf(e.stdout, "receipt key %d signs now; live keys %v\n", resp.GetKeyId(), resp.GetLiveKeyIds())
		return nil
	})
}
