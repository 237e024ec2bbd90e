package meta

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sundialmq/sundial/proto/validate"
)

// Authentication and authorization state (issue 20): the bearer tokens
// proxies accept, the roles that say what a token may do, and the keys
// proxies sign receipts with. Every proxy follows it through the brokers
// (the broker's AuthSync.WatchAuth) and decides each call from its copy;
// Apply only records what a proposer decided: a token's secret never
// reaches the meta group, only its SHA-256, and the receipt key's bytes
// are drawn by the proposer (Apply draws nothing and reads no clock).

// Permission is one thing a role may do on the topics of a grant.
type Permission string

// The permissions. Admin covers cluster operations and tokens; it is
// granted on "*" (cluster operations name no topic).
const (
	PermPublish Permission = "publish" // Publish, PublishStream, Cancel, Reschedule
	PermConsume Permission = "consume" // Subscribe, Receive, Ack, Nack, Extend
	PermInspect Permission = "inspect" // payload reads and listings: ListMessages, GetMessage, stats
	PermManage  Permission = "manage"  // topics and groups: create, update, delete, purge, redrive
	PermAdmin   Permission = "admin"   // cluster operations, tokens, roles, receipt keys
)

// Permissions lists every permission, in the order docs show them.
var Permissions = []Permission{PermPublish, PermConsume, PermInspect, PermManage, PermAdmin}

// Valid says p is a known permission.
func (p Permission) Valid() bool { return slices.Contains(Permissions, p) }

// AdminRole is the built-in role: every permission on every topic. It is
// never stored and cannot be created or deleted.
const AdminRole = "admin"

// Grant allows one permission on the topics Pattern names: "*" every
// topic, "demo*" every topic whose name starts with "demo", anything
// else the one topic of that name.
type Grant struct {
	Permission Permission `json:"permission"`
	Pattern    string     `json:"pattern"`
}

// String is the grant as shardctl takes it: permission:pattern.
func (g Grant) String() string { return string(g.Permission) + ":" + g.Pattern }

// Matches says the pattern names topic (validate.TopicPatternMatches).
func (g Grant) Matches(topic string) bool { return validate.TopicPatternMatches(g.Pattern, topic) }

// Role is a named set of grants.
type Role struct {
	Name        string  `json:"name"`
	Grants      []Grant `json:"grants"`
	CreatedAtMs int64   `json:"created_at_ms"`
}

// Allows says the role grants p on topic.
func (r *Role) Allows(p Permission, topic string) bool {
	return slices.ContainsFunc(r.Grants, func(g Grant) bool { return g.Permission == p && g.Matches(topic) })
}

// AdminRoleGrants are the grants of the built-in admin role.
func AdminRoleGrants() []Grant {
	gs := make([]Grant, 0, len(Permissions))
	for _, p := range Permissions {
		gs = append(gs, Grant{Permission: p, Pattern: "*"})
	}
	return gs
}

// Token is a bearer token as the meta group keeps it: its name, the
// SHA-256 of its secret (the secret itself is shown once to whoever
// created it, never stored), its role, and when it expires (0: never).
type Token struct {
	Name        string `json:"name"`
	Hash        []byte `json:"hash"`
	Role        string `json:"role"`
	CreatedAtMs int64  `json:"created_at_ms"`
	ExpiresAtMs int64  `json:"expires_at_ms,omitempty"`
}

// ReceiptKey is a key proxies sign receipts with. ID is assigned by
// Apply (one more than the newest key's).
type ReceiptKey struct {
	ID          uint32 `json:"id"`
	Secret      []byte `json:"secret"`
	CreatedAtMs int64  `json:"created_at_ms"`
}

// ReceiptKeysKept is how many receipt keys live at once: the newest signs,
// both verify, so a rotation leaves receipts signed before it valid until
// the next rotation drops their key.
const ReceiptKeysKept = 2

// Auth is the authentication state of the cluster.
type Auth struct {
	// Revision grows by one with every change of the auth state: proxies
	// install a state only if it is newer than theirs.
	Revision uint64 `json:"revision"`
	// Bootstrapped is set by the first auth_bootstrap: later ones change
	// nothing, so a bootstrap token file given at every start does not
	// bring back a token once revoked.
	Bootstrapped bool              `json:"bootstrapped,omitempty"`
	Tokens       map[string]*Token `json:"tokens,omitempty"`
	Roles        map[string]*Role  `json:"roles,omitempty"`
	// ReceiptKeys, newest first, at most ReceiptKeysKept.
	ReceiptKeys []ReceiptKey `json:"receipt_keys,omitempty"`
}

// Clone is a deep copy; nil for nil.
func (a *Auth) Clone() *Auth {
	if a == nil {
		return nil
	}
	c := &Auth{Revision: a.Revision, Bootstrapped: a.Bootstrapped, ReceiptKeys: make([]ReceiptKey, len(a.ReceiptKeys))}
	for i, k := range a.ReceiptKeys {
		c.ReceiptKeys[i] = ReceiptKey{ID: k.ID, Secret: slices.Clone(k.Secret), CreatedAtMs: k.CreatedAtMs}
	}
	if a.Tokens != nil {
		c.Tokens = make(map[string]*Token, len(a.Tokens))
		for n, t := range a.Tokens {
			tt := *t
			tt.Hash = slices.Clone(t.Hash)
			c.Tokens[n] = &tt
		}
	}
	if a.Roles != nil {
		c.Roles = make(map[string]*Role, len(a.Roles))
		for n, r := range a.Roles {
			rr := *r
			rr.Grants = slices.Clone(r.Grants)
			c.Roles[n] = &rr
		}
	}
	return c
}

// Role answers the role named name: the built-in admin role, or a stored
// one.
func (a *Auth) Role(name string) (*Role, bool) {
	if name == AdminRole {
		return &Role{Name: AdminRole, Grants: AdminRoleGrants()}, true
	}
	if a == nil {
		return nil, false
	}
	r, ok := a.Roles[name]
	return r, ok
}

// TokenNames are the token names in ascending order.
func (a *Auth) TokenNames() []string {
	if a == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(a.Tokens))
}

// RoleNames are the stored role names in ascending order (admin, built
// in, is not among them).
func (a *Auth) RoleNames() []string {
	if a == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(a.Roles))
}

// The auth ops, with the Command fields each reads: auth_bootstrap
// (Token, ReceiptKey), create_token (Token; ReceiptKey, the first key,
// stored only when there is none yet), revoke_token (Name),
// create_role (Role), delete_role (Name), rotate_receipt_key (ReceiptKey).
const (
	OpAuthBootstrap    Op = "auth_bootstrap"
	OpCreateToken      Op = "create_token"
	OpRevokeToken      Op = "revoke_token"
	OpCreateRole       Op = "create_role"
	OpDeleteRole       Op = "delete_role"
	OpRotateReceiptKey Op = "rotate_receipt_key"
)

// ResultInUse refuses to delete a role a token still names. Its value
// stands apart from the other results so that they can grow.
const ResultInUse uint64 = 100

// Limits of what the auth commands store.
const (
	MaxAuthNameBytes  = 128 // token and role names
	MaxGrants         = 64  // grants of one role
	MaxPatternBytes   = 256 // a grant's topic pattern
	ReceiptKeyBytes   = 32  // a receipt key's secret
	TokenHashBytes    = 32  // SHA-256
	MaxTokens         = 10000
	MaxRoles          = 1000
	reservedTokenName = ""
)

// ValidAuthName says name may name a token or role: 1 to MaxAuthNameBytes
// of letters, digits, '-', '_' and '.'.
func ValidAuthName(name string) bool {
	if name == reservedTokenName || len(name) > MaxAuthNameBytes {
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

// ValidGrant says why g cannot be stored, "" when it can.
func ValidGrant(g Grant) string {
	switch {
	case !g.Permission.Valid():
		return fmt.Sprintf("unknown permission %q (one of publish, consume, inspect, manage, admin)", g.Permission)
	case g.Pattern == "" || len(g.Pattern) > MaxPatternBytes:
		return fmt.Sprintf("pattern must be 1 to %d bytes", MaxPatternBytes)
	case strings.Contains(strings.TrimSuffix(g.Pattern, "*"), "*"):
		return fmt.Sprintf("pattern %q: '*' may only end a pattern", g.Pattern)
	case g.Permission == PermAdmin && g.Pattern != "*":
		return "admin is granted on \"*\" only (cluster operations name no topic)"
	}
	return ""
}

// checkAuthCommand is DecodeCommand's check of an auth op.
func (c *Command) checkAuthCommand() error {
	bad := func(why string) error { return fmt.Errorf("%w: %s %s", ErrMalformedCommand, c.Op, why) }
	checkToken := func() error {
		t := c.Token
		if t == nil || !ValidAuthName(t.Name) || len(t.Hash) != TokenHashBytes || !ValidAuthName(t.Role) || t.ExpiresAtMs < 0 {
			return bad("needs a token with a valid name, a 32-byte hash and a role")
		}
		return nil
	}
	checkKey := func() error {
		if c.ReceiptKey == nil || len(c.ReceiptKey.Secret) != ReceiptKeyBytes {
			return bad("needs a 32-byte receipt key")
		}
		return nil
	}
	switch c.Op {
	case OpAuthBootstrap:
		if err := checkToken(); err != nil {
			return err
		}
		return checkKey()
	case OpCreateToken:
		if err := checkToken(); err != nil {
			return err
		}
		if c.ReceiptKey != nil {
			return checkKey()
		}
	case OpRevokeToken, OpDeleteRole:
		if !ValidAuthName(c.Name) {
			return bad("needs a valid name")
		}
	case OpCreateRole:
		if c.Role == nil || !ValidAuthName(c.Role.Name) || len(c.Role.Grants) == 0 || len(c.Role.Grants) > MaxGrants {
			return bad(fmt.Sprintf("needs a role with a valid name and 1 to %d grants", MaxGrants))
		}
		for _, g := range c.Role.Grants {
			if why := ValidGrant(g); why != "" {
				return bad(why)
			}
		}
	case OpRotateReceiptKey:
		return checkKey()
	}
	return nil
}

// auth is s.Auth, made when nil.
func (s *State) auth() *Auth {
	if s.Auth == nil {
		s.Auth = &Auth{}
	}
	if s.Auth.Tokens == nil {
		s.Auth.Tokens = map[string]*Token{}
	}
	if s.Auth.Roles == nil {
		s.Auth.Roles = map[string]*Role{}
	}
	return s.Auth
}

// authBootstrap stores the first admin token and receipt key, once: a
// cluster bootstrapped already answers ResultNoop and changes nothing.
func (s *State) authBootstrap(t *Token, k *ReceiptKey, nowMs int64) uint64 {
	if s.Auth != nil && s.Auth.Bootstrapped {
		return ResultNoop
	}
	a := s.auth()
	if _, taken := a.Tokens[t.Name]; taken {
		return ResultExists
	}
	a.Bootstrapped = true
	return s.createToken(t, k, nowMs)
}

// createToken stores t under its name, and k as the first receipt key
// when there is none yet; ResultExists for a name taken, ResultInvalid
// for a role that does not exist or a store full.
func (s *State) createToken(t *Token, k *ReceiptKey, nowMs int64) uint64 {
	a := s.auth()
	if _, taken := a.Tokens[t.Name]; taken {
		return ResultExists
	}
	if _, ok := a.Role(t.Role); !ok {
		return ResultInvalid
	}
	if len(a.Tokens) >= MaxTokens {
		return ResultInvalid
	}
	if k != nil && len(a.ReceiptKeys) == 0 {
		s.rotateReceiptKey(k, nowMs)
	}
	tt := *t
	tt.Hash = slices.Clone(t.Hash)
	tt.CreatedAtMs = nowMs
	a.Tokens[t.Name] = &tt
	a.Revision++
	return ResultOK
}

func (s *State) revokeToken(name string) uint64 {
	if s.Auth == nil || s.Auth.Tokens[name] == nil {
		return ResultNotFound
	}
	delete(s.Auth.Tokens, name)
	s.Auth.Revision++
	return ResultOK
}

// createRole stores r; ResultExists for a name taken (admin included).
func (s *State) createRole(r *Role, nowMs int64) uint64 {
	a := s.auth()
	if _, taken := a.Role(r.Name); taken {
		return ResultExists
	}
	if len(a.Roles) >= MaxRoles {
		return ResultInvalid
	}
	rr := Role{Name: r.Name, Grants: slices.Clone(r.Grants), CreatedAtMs: nowMs}
	a.Roles[r.Name] = &rr
	a.Revision++
	return ResultOK
}

// deleteRole removes a stored role: ResultInvalid for admin,
// ResultNotFound for an unknown one, ResultInUse while a token names it.
func (s *State) deleteRole(name string) uint64 {
	if name == AdminRole {
		return ResultInvalid
	}
	if s.Auth == nil || s.Auth.Roles[name] == nil {
		return ResultNotFound
	}
	for _, t := range s.Auth.Tokens {
		if t.Role == name {
			return ResultInUse
		}
	}
	delete(s.Auth.Roles, name)
	s.Auth.Revision++
	return ResultOK
}

// rotateReceiptKey makes k the signing key, keeping the one before it to
// verify with and dropping any older.
func (s *State) rotateReceiptKey(k *ReceiptKey, nowMs int64) uint64 {
	a := s.auth()
	var id uint32 = 1
	if len(a.ReceiptKeys) > 0 {
		id = a.ReceiptKeys[0].ID + 1
	}
	nk := ReceiptKey{ID: id, Secret: slices.Clone(k.Secret), CreatedAtMs: nowMs}
	a.ReceiptKeys = append([]ReceiptKey{nk}, a.ReceiptKeys...)
	if len(a.ReceiptKeys) > ReceiptKeysKept {
		a.ReceiptKeys = a.ReceiptKeys[:ReceiptKeysKept]
	}
	a.Revision++
	return ResultOK
}
