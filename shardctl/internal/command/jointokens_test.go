package command

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeJoinTokens answers the join-token calls and records create's request.
type fakeJoinTokens struct {
	sundialv1.UnimplementedClusterServer
	created *sundialv1.CreateJoinTokenRequest
}

func (f *fakeJoinTokens) CreateJoinToken(_ context.Context, req *sundialv1.CreateJoinTokenRequest) (*sundialv1.CreateJoinTokenResponse, error) {
	f.created = req
	return &sundialv1.CreateJoinTokenResponse{
		Token:  &sundialv1.JoinToken{Id: "0123456789abcdef", CreatedAtMs: 1e12, ExpiresAtMs: 1e12 + req.GetExpiresInMs(), Uses: req.GetUses()},
		Secret: "sdjt.0123456789abcdef.SECRET",
	}, nil
}

func (f *fakeJoinTokens) ListJoinTokens(context.Context, *sundialv1.ListJoinTokensRequest) (*sundialv1.ListJoinTokensResponse, error) {
	return &sundialv1.ListJoinTokensResponse{Tokens: []*sundialv1.JoinToken{
		{Id: "aaaaaaaaaaaaaaaa", CreatedAtMs: 1e12, ExpiresAtMs: 1e12 + 3600e3, Uses: 1, NodeIds: []uint64{4}, Spent: true},
		{Id: "bbbbbbbbbbbbbbbb", CreatedAtMs: 1e12, ExpiresAtMs: 1e12 + 1, Uses: 3, Expired: true},
	}}, nil
}

func (f *fakeJoinTokens) RevokeJoinToken(_ context.Context, req *sundialv1.RevokeJoinTokenRequest) (*sundialv1.RevokeJoinTokenResponse, error) {
	if req.GetId() != "aaaaaaaaaaaaaaaa" {
		return nil, status.Error(codes.NotFound, "host: no such join token: "+req.GetId())
	}
	return &sundialv1.RevokeJoinTokenResponse{}, nil
}

// join-token create sends its flags and prints only the secret on stdout
// (so `> file` keeps just the token), the rest on stderr; list shows each
// token's state and never a secret; revoke of an unknown id fails.
func TestJoinTokenCommands(t *testing.T) {
	fake := &fakeJoinTokens{}
	proxy := serveCluster(t, fake)
	code, out, stderr := run(t, "", "--proxy", proxy, "join-token", "create", "--expires", "10m", "--uses", "3")
	if code != ExitOK || out != "sdjt.0123456789abcdef.SECRET\n" || !strings.Contains(stderr, "not shown again") {
		t.Fatalf("join-token create = %d, stdout %q, stderr %q; want 0, the secret alone, a note on stderr", code, out, stderr)
	}
	if got := fake.created; got.GetExpiresInMs() != (10*time.Minute).Milliseconds() || got.GetUses() != 3 {
		t.Errorf("join-token create sent %v, want expires_in_ms 600000, uses 3", got)
	}
	for _, tc := range []cliCase{
		{name: "create json", args: []string{"join-token", "create", "-o", "json"}, wantCode: ExitOK, wantOut: `"secret": "sdjt.0123456789abcdef.SECRET"`},
		{name: "list", args: []string{"join-token", "list"}, wantCode: ExitOK, wantOut: "spent"},
		{name: "list expired", args: []string{"join-token", "list"}, wantCode: ExitOK, wantOut: "expired"},
		{name: "list used", args: []string{"join-token", "list"}, wantCode: ExitOK, wantOut: "1/1"},
		{name: "revoke", args: []string{"join-token", "revoke", "aaaaaaaaaaaaaaaa"}, wantCode: ExitOK, wantOut: "revoked"},
		{name: "revoke unknown", args: []string{"join-token", "revoke", "cccccccccccccccc"}, wantCode: ExitFailure, wantStderr: "no such join token"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, proxy) })
	}
	if _, out, _ := run(t, "", "--proxy", proxy, "join-token", "list", "-o", "json"); strings.Contains(out, "secret") {
		t.Errorf("join-token list -o json = %s, want no secret field", out)
	}
	if fake.created.GetExpiresInMs() != time.Hour.Milliseconds() || fake.created.GetUses() != 1 {
		t.Errorf("join-token create without flags sent %v, want the defaults 1h and 1 use", fake.created)
	}
}
