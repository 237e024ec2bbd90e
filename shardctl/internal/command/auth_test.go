package command

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeAuth records what the auth commands send.
type fakeAuth struct {
	sundialv1.UnimplementedAuthServer
	mu       sync.Mutex
	authz    []string // the authorization metadata of each call
	creates  []*sundialv1.CreateTokenRequest
	roles    []*sundialv1.CreateRoleRequest
	revoked  []string
	rotation int
}

func (f *fakeAuth) note(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.authz = append(f.authz, md.Get("authorization")...)
}

func (f *fakeAuth) CreateToken(ctx context.Context, req *sundialv1.CreateTokenRequest) (*sundialv1.CreateTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(ctx)
	f.creates = append(f.creates, req)
	return &sundialv1.CreateTokenResponse{Token: &sundialv1.TokenInfo{Name: req.GetName(), Role: req.GetRole()}, Secret: "s3cr3t-value"}, nil
}

func (f *fakeAuth) CreateRole(ctx context.Context, req *sundialv1.CreateRoleRequest) (*sundialv1.Role, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(ctx)
	f.roles = append(f.roles, req)
	return &sundialv1.Role{Name: req.GetName(), Grants: req.GetGrants()}, nil
}

func (f *fakeAuth) RevokeToken(ctx context.Context, req *sundialv1.RevokeTokenRequest) (*sundialv1.RevokeTokenResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(ctx)
	f.revoked = append(f.revoked, req.GetName())
	return &sundialv1.RevokeTokenResponse{}, nil
}

func (f *fakeAuth) RotateReceiptKey(ctx context.Context, _ *sundialv1.RotateReceiptKeyRequest) (*sundialv1.RotateReceiptKeyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(ctx)
	f.rotation++
	return &sundialv1.RotateReceiptKeyResponse{KeyId: 2, LiveKeyIds: []uint32{2, 1}}, nil
}

func TestAuthCommands(t *testing.T) {
	fake := &fakeAuth{}
	addr := serve(t, func(s *grpc.Server) { sundialv1.RegisterAuthServer(s, fake) })
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []cliCase{
		{name: "create prints the secret", args: []string{"auth", "token", "create", "demo", "--role", "demo", "--expires", "720h"}, wantOut: "s3cr3t-value"},
		{name: "create without a role", args: []string{"auth", "token", "create", "demo"}, wantCode: ExitUsage, wantStderr: "--role is required"},
		{name: "create without a name", args: []string{"auth", "token", "create", "--role", "admin"}, wantCode: ExitUsage, wantStderr: "exactly one NAME"},
		{name: "create with a negative expiry", args: []string{"auth", "token", "create", "x", "--role", "admin", "--expires", "-1h"}, wantCode: ExitUsage, wantStderr: "--expires"},
		{name: "role with grants", args: []string{"auth", "role", "create", "demo", "--grant", "publish,consume:demo*", "--grant", "inspect:demo"}, wantOut: "publish:demo* consume:demo* inspect:demo"},
		{name: "role without grants", args: []string{"auth", "role", "create", "demo"}, wantCode: ExitUsage, wantStderr: "--grant is required"},
		{name: "role with a bad grant", args: []string{"auth", "role", "create", "demo", "--grant", "publish"}, wantCode: ExitUsage, wantStderr: "PERMISSION:PATTERN"},
		{name: "revoke", args: []string{"auth", "token", "revoke", "demo"}, wantOut: "token demo revoked"},
		{name: "rotate", args: []string{"auth", "rotate-receipt-key"}, wantOut: "receipt key 2 signs now"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.checkRun(t, "", append([]string{"--proxy", addr, "--token-file", tokenFile}, tc.args...))
		})
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.creates) != 1 || fake.creates[0].GetExpiresInSeconds() != 720*3600 || fake.creates[0].GetRole() != "demo" {
		t.Errorf("CreateToken requests = %v, want one for role demo expiring in 720h", fake.creates)
	}
	if len(fake.roles) != 1 || len(fake.roles[0].GetGrants()) != 3 {
		t.Errorf("CreateRole requests = %v, want one with 3 grants", fake.roles)
	}
	for _, a := range fake.authz {
		if a != "Bearer admin-secret" {
			t.Errorf("a call sent authorization %q, want the token file's", a)
		}
	}
	if len(fake.authz) != 4 {
		t.Errorf("%d calls carried a token, want 4", len(fake.authz))
	}
}

func TestTokenFromEnvironment(t *testing.T) {
	fake := &fakeAuth{}
	addr := serve(t, func(s *grpc.Server) { sundialv1.RegisterAuthServer(s, fake) })
	t.Setenv("SUNDIAL_TOKEN", "from-env")
	cliCase{name: "rotate", wantOut: "receipt key"}.checkRun(t, "", []string{"--proxy", addr, "auth", "rotate-receipt-key"})
	cliCase{name: "missing file", wantCode: ExitUsage, wantStderr: "--token-file"}.checkRun(t, "", []string{"--proxy", addr, "--token-file", "/nonexistent/t", "auth", "rotate-receipt-key"})
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.authz) != 1 || fake.authz[0] != "Bearer from-env" {
		t.Fatalf("authorization sent = %q, want Bearer from-env", fake.authz)
	}
}
