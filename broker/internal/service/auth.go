package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Auth serves sundialv1.Auth (tokens, roles, receipt keys: proxies forward
// it here once they checked the caller holds admin) and brokerv1.AuthSync
// (the auth state proxies follow). Secrets are drawn here: a token's
// secret is answered once and only its SHA-256 is proposed; a receipt key
// is proposed whole (the meta group keeps it).
type Auth struct {
	sundialv1.UnimplementedAuthServer
	brokerv1.UnimplementedAuthSyncServer
	host *host.Host // its Refusal
	meta *host.MetaClient
	now  func() time.Time
}

// NewAuth returns the Auth and AuthSync services.
func NewAuth(h *host.Host, now func() time.Time) *Auth {
	return &Auth{host: h, meta: h.MetaClient(), now: now}
}

// TokenSecretBytes is the size of a token's secret before encoding.
const TokenSecretBytes = 32

// MaxTokenLifetime bounds expires_in_seconds (ten years).
const MaxTokenLifetime = 10 * 365 * 24 * time.Hour

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics instead)
	return b
}

func (a *Auth) propose(ctx context.Context, c *meta.Command) (uint64, error) {
	code, _, err := a.meta.ProposeMeta(ctx, c)
	return code, err
}

// CreateToken draws a secret, stores its hash under the name and answers
// the secret.
func (a *Auth) CreateToken(ctx context.Context, req *sundialv1.CreateTokenRequest) (*sundialv1.CreateTokenResponse, error) {
	var bad []apierr.FieldViolation
	if !meta.ValidAuthName(req.GetName()) {
		bad = append(bad, apierr.FieldViolation{Field: "name", Description: "required: 1 to 128 letters, digits, '-', '_' or '.'"})
	}
	if !meta.ValidAuthName(req.GetRole()) {
		bad = append(bad, apierr.FieldViolation{Field: "role", Description: "required: admin or a role made by CreateRole"})
	}
	if s := req.GetExpiresInSeconds(); s < 0 || time.Duration(s)*time.Second > MaxTokenLifetime {
		bad = append(bad, apierr.FieldViolation{Field: "expires_in_seconds", Description: "0 (never) up to ten years"})
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	secret := randomBytes(TokenSecretBytes)
	sum := sha256.Sum256([]byte(base64.RawURLEncoding.EncodeToString(secret)))
	now := a.now()
	tok := &meta.Token{Name: req.GetName(), Hash: sum[:], Role: req.GetRole()}
	if s := req.GetExpiresInSeconds(); s > 0 {
		tok.ExpiresAtMs = now.Add(time.Duration(s) * time.Second).UnixMilli()
	}
	code, err := a.propose(ctx, &meta.Command{Op: meta.OpCreateToken, Token: tok, ReceiptKey: &meta.ReceiptKey{Secret: randomBytes(meta.ReceiptKeyBytes)}})
	if err != nil {
		return nil, err
	}
	switch code {
	case meta.ResultOK:
	case meta.ResultExists:
		return nil, status.Errorf(codes.AlreadyExists, "token %q exists: revoke it first or choose another name", req.GetName())
	default:
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "role", Description: fmt.Sprintf("no role %q: admin or a role made by CreateRole", req.GetRole())})
	}
	st := a.meta.Meta()
	info := &sundialv1.TokenInfo{Name: tok.Name, Role: tok.Role, ExpiresAtMs: tok.ExpiresAtMs, CreatedAtMs: now.UnixMilli()}
	if st.Auth != nil {
		if t := st.Auth.Tokens[tok.Name]; t != nil {
			info.CreatedAtMs = t.CreatedAtMs
		}
	}
	return &sundialv1.CreateTokenResponse{Token: info, Secret: base64.RawURLEncoding.EncodeToString(secret)}, nil
}

// ListTokens answers the tokens, by name, from a linearizable read.
func (a *Auth) ListTokens(ctx context.Context, _ *sundialv1.ListTokensRequest) (*sundialv1.ListTokensResponse, error) {
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.ListTokensResponse{}
	for _, n := range st.Auth.TokenNames() {
		t := st.Auth.Tokens[n]
		resp.Tokens = append(resp.Tokens, &sundialv1.TokenInfo{Name: t.Name, Role: t.Role, CreatedAtMs: t.CreatedAtMs, ExpiresAtMs: t.ExpiresAtMs})
	}
	return resp, nil
}

// RevokeToken deletes a token.
func (a *Auth) RevokeToken(ctx context.Context, req *sundialv1.RevokeTokenRequest) (*sundialv1.RevokeTokenResponse, error) {
	if !meta.ValidAuthName(req.GetName()) {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "name", Description: "required: the name of the token to revoke"})
	}
	code, err := a.propose(ctx, &meta.Command{Op: meta.OpRevokeToken, Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	if code == meta.ResultNotFound {
		return nil, status.Errorf(codes.NotFound, "no token %q", req.GetName())
	}
	return &sundialv1.RevokeTokenResponse{}, nil
}

// CreateRole stores a role.
func (a *Auth) CreateRole(ctx context.Context, req *sundialv1.CreateRoleRequest) (*sundialv1.Role, error) {
	var bad []apierr.FieldViolation
	if !meta.ValidAuthName(req.GetName()) {
		bad = append(bad, apierr.FieldViolation{Field: "name", Description: "required: 1 to 128 letters, digits, '-', '_' or '.'"})
	}
	if n := len(req.GetGrants()); n == 0 || n > meta.MaxGrants {
		bad = append(bad, apierr.FieldViolation{Field: "grants", Description: fmt.Sprintf("1 to %d grants", meta.MaxGrants)})
	}
	role := &meta.Role{Name: req.GetName()}
	for i, g := range req.GetGrants() {
		mg := meta.Grant{Permission: meta.Permission(g.GetPermission()), Pattern: g.GetPattern()}
		if why := meta.ValidGrant(mg); why != "" {
			bad = append(bad, apierr.FieldViolation{Field: fmt.Sprintf("grants[%d]", i), Description: why})
		}
		role.Grants = append(role.Grants, mg)
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	code, err := a.propose(ctx, &meta.Command{Op: meta.OpCreateRole, Role: role})
	if err != nil {
		return nil, err
	}
	switch code {
	case meta.ResultOK:
	case meta.ResultExists:
		return nil, status.Errorf(codes.AlreadyExists, "role %q exists", req.GetName())
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "role %q not stored: at most %d roles", req.GetName(), meta.MaxRoles)
	}
	return roleProto(role, false), nil
}

func roleProto(r *meta.Role, builtin bool) *sundialv1.Role {
	out := &sundialv1.Role{Name: r.Name, CreatedAtMs: r.CreatedAtMs, Builtin: builtin}
	for _, g := range r.Grants {
		out.Grants = append(out.Grants, &sundialv1.Grant{Permission: string(g.Permission), Pattern: g.Pattern})
	}
	return out
}

// ListRoles answers the built-in admin role, then the stored ones by name.
func (a *Auth) ListRoles(ctx context.Context, _ *sundialv1.ListRolesRequest) (*sundialv1.ListRolesResponse, error) {
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	admin, _ := st.Auth.Role(meta.AdminRole)
	resp := &sundialv1.ListRolesResponse{Roles: []*sundialv1.Role{roleProto(admin, true)}}
	for _, n := range st.Auth.RoleNames() {
		resp.Roles = append(resp.Roles, roleProto(st.Auth.Roles[n], false))
	}
	return resp, nil
}

// DeleteRole deletes a stored role no token names.
func (a *Auth) DeleteRole(ctx context.Context, req *sundialv1.DeleteRoleRequest) (*sundialv1.DeleteRoleResponse, error) {
	if !meta.ValidAuthName(req.GetName()) {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "name", Description: "required: the name of the role to delete"})
	}
	code, err := a.propose(ctx, &meta.Command{Op: meta.OpDeleteRole, Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	switch code {
	case meta.ResultOK:
		return &sundialv1.DeleteRoleResponse{}, nil
	case meta.ResultNotFound:
		return nil, status.Errorf(codes.NotFound, "no role %q", req.GetName())
	case meta.ResultInUse:
		return nil, apierr.FailedPrecondition(apierr.FieldViolation{Field: "name", Description: fmt.Sprintf("tokens still name role %q: revoke them first", req.GetName())})
	}
	return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "name", Description: "the built-in admin role cannot be deleted"})
}

// RotateReceiptKey draws a new receipt key.
func (a *Auth) RotateReceiptKey(ctx context.Context, _ *sundialv1.RotateReceiptKeyRequest) (*sundialv1.RotateReceiptKeyResponse, error) {
	if _, err := a.propose(ctx, &meta.Command{Op: meta.OpRotateReceiptKey, ReceiptKey: &meta.ReceiptKey{Secret: randomBytes(meta.ReceiptKeyBytes)}}); err != nil {
		return nil, err
	}
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	resp := &sundialv1.RotateReceiptKeyResponse{}
	for i, k := range st.Auth.ReceiptKeys {
		if i == 0 {
			resp.KeyId = k.ID
		}
		resp.LiveKeyIds = append(resp.LiveKeyIds, k.ID)
	}
	return resp, nil
}

// BootstrapAuth stores the first admin token and receipt key, once.
func (a *Auth) BootstrapAuth(ctx context.Context, req *brokerv1.BootstrapAuthRequest) (*brokerv1.BootstrapAuthResponse, error) {
	var bad []apierr.FieldViolation
	if !meta.ValidAuthName(req.GetTokenName()) {
		bad = append(bad, apierr.FieldViolation{Field: "token_name", Description: "required: 1 to 128 letters, digits, '-', '_' or '.'"})
	}
	if len(req.GetTokenSha256()) != meta.TokenHashBytes {
		bad = append(bad, apierr.FieldViolation{Field: "token_sha256", Description: "required: the 32-byte SHA-256 of the token"})
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	code, err := a.propose(ctx, &meta.Command{Op: meta.OpAuthBootstrap,
		Token:      &meta.Token{Name: req.GetTokenName(), Hash: req.GetTokenSha256(), Role: meta.AdminRole},
		ReceiptKey: &meta.ReceiptKey{Secret: randomBytes(meta.ReceiptKeyBytes)}})
	if err != nil {
		return nil, err
	}
	if code == meta.ResultExists {
		return nil, status.Errorf(codes.AlreadyExists, "a token named %q exists: the bootstrap token needs another name", req.GetTokenName())
	}
	return &brokerv1.BootstrapAuthResponse{Bootstrapped: code == meta.ResultOK}, nil
}

// authPoll is how often an open WatchAuth stream looks at the meta state
// this broker applied (the host refreshes it at least every half second);
// authProgress how often a stream with no change sends a progress frame.
const (
	authPoll     = 100 * time.Millisecond
	authProgress = time.Second
)

// WatchAuth sends the auth state now and whenever its revision changes.
func (a *Auth) WatchAuth(_ *brokerv1.WatchAuthRequest, stream brokerv1.AuthSync_WatchAuthServer) error {
	tick := time.NewTicker(authPoll)
	defer tick.Stop()
	var sent *brokerv1.AuthState
	var sentAt time.Time
	for {
		if err := a.host.Refusal(); err != nil {
			return status.Errorf(codes.Unavailable, "this broker serves no auth state: %v", err)
		}
		st := a.meta.Meta()
		if sent == nil || authRevision(st) != sent.GetRevision() || time.Since(sentAt) >= authProgress {
			sent = authStateProto(st.Auth)
			if err := stream.Send(sent); err != nil {
				return err
			}
			sentAt = time.Now()
		}
		select {
		case <-tick.C:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func authRevision(st *meta.State) uint64 {
	if st.Auth == nil {
		return 0
	}
	return st.Auth.Revision
}

func authStateProto(a *meta.Auth) *brokerv1.AuthState {
	out := &brokerv1.AuthState{}
	if a == nil {
		return out
	}
	out.Revision = a.Revision
	for _, n := range a.TokenNames() {
		t := a.Tokens[n]
		out.Tokens = append(out.Tokens, &brokerv1.AuthToken{Name: t.Name, Sha256: t.Hash, Role: t.Role, CreatedAtMs: t.CreatedAtMs, ExpiresAtMs: t.ExpiresAtMs})
	}
	for _, n := range a.RoleNames() {
		r := a.Roles[n]
		pr := &brokerv1.AuthRole{Name: r.Name}
		for _, g := range r.Grants {
			pr.Grants = append(pr.Grants, &brokerv1.AuthGrant{Permission: string(g.Permission), Pattern: g.Pattern})
		}
		out.Roles = append(out.Roles, pr)
	}
	for _, k := range a.ReceiptKeys {
		out.ReceiptKeys = append(out.ReceiptKeys, &brokerv1.AuthReceiptKey{Id: k.ID, Secret: k.Secret})
	}
	return out
}
