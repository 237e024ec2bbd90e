// Package auth is the proxy's authentication and authorization: it follows
// the cluster's auth state (tokens as SHA-256, roles, receipt keys) from
// the brokers' AuthSync.WatchAuth, finds the principal of each call (a
// bearer token, or a client certificate mapped by subject), decides each
// gRPC method by one rule table (rules.go), signs the receipts it hands
// out and verifies them when they come back (receipts.go), and logs and
// counts every admin action and authentication failure (audit.go).
//
// The Store is written by the Watcher's goroutine and read by every call;
// it holds an immutable snapshot behind an atomic pointer. Streams started
// by a principal watch the store and end with Unauthenticated once their
// token is revoked or expires (interceptor.go).
package auth

import (
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"time"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Permission is one thing a role may do; the names are the meta group's.
type Permission string

// The permissions (meta.Permissions).
const (
	Publish Permission = "publish"
	Consume Permission = "consume"
	Inspect Permission = "inspect"
	Manage  Permission = "manage"
	Admin   Permission = "admin"
)

// allPermissions are every permission, for the built-in admin role.
var allPermissions = []Permission{Publish, Consume, Inspect, Manage, Admin}

// AdminRole is the built-in role holding every permission on every topic.
const AdminRole = "admin"

type grant struct {
	perm    Permission
	pattern string
}

// matches says the pattern names topic (validate.TopicPatternMatches).
func (g grant) matches(topic string) bool { return validate.TopicPatternMatches(g.pattern, topic) }

type token struct {
	name      string
	hash      [sha256.Size]byte
	role      string
	expiresAt time.Time // zero: never
}

// ReceiptKey signs and verifies receipts.
type ReceiptKey struct {
	ID     uint32
	Secret []byte
}

// Snapshot is one revision of the auth state; never modified.
type Snapshot struct {
	Revision uint64
	tokens   map[[sha256.Size]byte]*token
	roles    map[string][]grant
	// Keys are the receipt keys, newest (the signing one) first.
	Keys []ReceiptKey
}

// NewSnapshot converts the state a broker sent.
func NewSnapshot(st *brokerv1.AuthState) *Snapshot {
	s := &Snapshot{Revision: st.GetRevision(), tokens: map[[sha256.Size]byte]*token{}, roles: map[string][]grant{}}
	for _, t := range st.GetTokens() {
		if len(t.GetSha256()) != sha256.Size {
			continue
		}
		tk := &token{name: t.GetName(), role: t.GetRole()}
		copy(tk.hash[:], t.GetSha256())
		if ms := t.GetExpiresAtMs(); ms > 0 {
			tk.expiresAt = time.UnixMilli(ms)
		}
		s.tokens[tk.hash] = tk
	}
	for _, r := range st.GetRoles() {
		for _, g := range r.GetGrants() {
			s.roles[r.GetName()] = append(s.roles[r.GetName()], grant{Permission(g.GetPermission()), g.GetPattern()})
		}
	}
	for _, k := range st.GetReceiptKeys() {
		s.Keys = append(s.Keys, ReceiptKey{ID: k.GetId(), Secret: k.GetSecret()})
	}
	return s
}

// grants are the grants of role: every permission on "*" for admin.
func (s *Snapshot) grants(role string) []grant {
	if role == AdminRole {
		gs := make([]grant, len(allPermissions))
		for i, p := range allPermissions {
			gs[i] = grant{p, "*"}
		}
		return gs
	}
	if s == nil {
		return nil
	}
	return s.roles[role]
}

// Store holds the newest snapshot and wakes whoever waits for a change.
type Store struct {
	cur atomic.Pointer[Snapshot]

	mu      sync.Mutex    // guards changed
	changed chan struct{} // closed (and replaced) when cur changes
}

// NewStore is an empty store: no snapshot until the first install.
func NewStore() *Store { return &Store{changed: make(chan struct{})} }

// Snapshot is the current snapshot, nil before the first.
func (s *Store) Snapshot() *Snapshot { return s.cur.Load() }

// Changed is closed at the next install.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Install makes snap current unless it is older than the current one.
func (s *Store) Install(snap *Snapshot) bool {
	if prev := s.cur.Load(); prev != nil && snap.Revision < prev.Revision {
		return false
	}
	s.cur.Store(snap)
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return true
}
