package meta

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Join tokens admit brokers to the cluster (join_node). A token is a
// random secret given to the operator once (shardctl join-token create);
// the meta state keeps only its id and the SHA-256 of its secret, its
// expiry and how many joins it may still admit. A join spends one use in
// the same entry that registers the node, so two joins cannot spend one
// single-use token: the second is applied after the first and finds it
// spent.
//
// Ops: create_join_token (JoinToken: the record to store, ID and Hash
// set), revoke_join_token (Name: the token id). join_node reads JoinUse.

// Ops of join tokens.
const (
	OpCreateJoinToken Op = "create_join_token"
	OpRevokeJoinToken Op = "revoke_join_token"
)

// JoinToken is a stored join token: never its secret.
type JoinToken struct {
	ID string `json:"id"`
	// Hash is the hex SHA-256 of the token's secret.
	Hash      string `json:"hash"`
	CreatedMs int64  `json:"created_ms"`
	// ExpiresMs is when the token stops admitting joins (Unix ms); 0
	// never.
	ExpiresMs int64 `json:"expires_ms,omitempty"`
	// Uses is how many joins the token admits in all; 0 is unlimited
	// (until it expires).
	Uses int `json:"uses,omitempty"`
	// Nodes are the nodes it admitted, in order: a join retried by one of
	// them (same data dir) is answered again even once the token is spent.
	Nodes []NodeID `json:"nodes,omitempty"`
}

// Clone copies t.
func (t *JoinToken) Clone() *JoinToken {
	tt := *t
	tt.Nodes = slices.Clone(t.Nodes)
	return &tt
}

// Spent says the token admitted all the joins it may.
func (t *JoinToken) Spent() bool { return t.Uses > 0 && len(t.Nodes) >= t.Uses }

// Expired says the token no longer admits joins at nowMs.
func (t *JoinToken) Expired(nowMs int64) bool { return t.ExpiresMs > 0 && nowMs >= t.ExpiresMs }

// JoinUse is what a join_node command presents: the id of a token and the
// SHA-256 of the secret the joining broker gave. Required makes the join
// fail without a valid token; without it (a plaintext loopback cluster) a
// join presenting no token is admitted as before join tokens, and one
// presenting a token must present a valid one.
type JoinUse struct {
	ID       string `json:"id,omitempty"`
	Hash     string `json:"hash,omitempty"`
	Required bool   `json:"required,omitempty"`
}

// HashSecret is the hex SHA-256 of a token's secret, as JoinToken.Hash
// and JoinUse.Hash hold it.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Reasons a join is refused for its token: the data of ResultDenied (a
// JSON string). They are for the refusing broker's log and metrics; the
// joining broker is told only that its token was refused.
const (
	DeniedNoToken = "no_token"  // a token is required and none was given
	DeniedBad     = "bad_token" // no such token, or the secret does not match
	DeniedExpired = "expired_token"
	DeniedSpent   = "spent_token"
)

// ResultDenied refuses a join for its token; the data is the reason (a
// JSON string, one of the Denied constants).
const ResultDenied = ResultCannotCancel + 1

// CheckJoinToken is what join_node decides about use at nowMs, given the
// node id of the same data dir if it joined before (0 if not): "" admits
// it, else the Denied reason. A join retried by a node the token
// admitted is admitted again whatever the token's expiry and uses, so a
// joining broker whose answer was lost can ask again. It reads s only:
// brokers call it on their own state before proposing, to refuse a bad
// token without a proposal (the entry decides).
func (s *State) CheckJoinToken(use *JoinUse, retriedBy NodeID, nowMs int64) string {
	if use == nil || use.ID == "" {
		if use != nil && use.Required {
			return DeniedNoToken
		}
		return ""
	}
	t, ok := s.JoinTokens[use.ID]
	if !ok || subtle.ConstantTimeCompare([]byte(t.Hash), []byte(use.Hash)) != 1 {
		return DeniedBad
	}
	if retriedBy != 0 && slices.Contains(t.Nodes, retriedBy) {
		return ""
	}
	switch {
	case t.Expired(nowMs):
		return DeniedExpired
	case t.Spent():
		return DeniedSpent
	}
	return ""
}

// spendJoinToken records that the token of use admitted node n.
func (s *State) spendJoinToken(use *JoinUse, n NodeID) {
	if use == nil || use.ID == "" {
		return
	}
	t := s.JoinTokens[use.ID].Clone()
	if !slices.Contains(t.Nodes, n) {
		t.Nodes = append(t.Nodes, n)
	}
	s.JoinTokens[use.ID] = t
}

// createJoinToken stores t, created at nowMs. ResultExists: its id is
// taken (ids are random: a retried proposal).
func (s *State) createJoinToken(t *JoinToken, nowMs int64) uint64 {
	if _, ok := s.JoinTokens[t.ID]; ok {
		return ResultExists
	}
	if s.JoinTokens == nil {
		s.JoinTokens = map[string]*JoinToken{}
	}
	tt := t.Clone()
	tt.CreatedMs, tt.Nodes = nowMs, nil
	s.JoinTokens[t.ID] = tt
	return ResultOK
}

// revokeJoinToken deletes token id: it admits no join from now on.
func (s *State) revokeJoinToken(id string) uint64 {
	if _, ok := s.JoinTokens[id]; !ok {
		return ResultNotFound
	}
	delete(s.JoinTokens, id)
	return ResultOK
}

// JoinTokenIDs are the ids of the stored join tokens, ascending.
func (s *State) JoinTokenIDs() []string { return slices.Sorted(maps.Keys(s.JoinTokens)) }

func deniedData(reason string) []byte {
	b, _ := json.Marshal(reason)
	return b
}

func cloneJoinTokens(m map[string]*JoinToken) map[string]*JoinToken {
	if m == nil {
		return nil
	}
	c := make(map[string]*JoinToken, len(m))
	for id, t := range m {
		c[id] = t.Clone()
	}
	return c
}

// JoinTokenPrefix starts every join token: sdjt.<id>.<secret>, the id 16
// hex digits, the secret 32 random bytes in unpadded base64url.
const JoinTokenPrefix = "sdjt."

// ErrBadJoinToken is a string that is not a join token.
var ErrBadJoinToken = errors.New("meta: not a join token (want sdjt.<id>.<secret>, as shardctl join-token create prints it)")

// NewJoinToken makes a token's id and secret from crypto/rand and
// answers them with the whole token.
func NewJoinToken() (id, secret, token string, err error) {
	b := make([]byte, 8+32)
	if _, err := rand.Read(b); err != nil {
		return "", "", "", fmt.Errorf("meta: join token: %w", err)
	}
	id, secret = hex.EncodeToString(b[:8]), base64.RawURLEncoding.EncodeToString(b[8:])
	return id, secret, JoinTokenPrefix + id + "." + secret, nil
}

// ParseJoinToken splits a token into its id and secret; surrounding
// white space (a file's final newline) is ignored.
func ParseJoinToken(token string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), JoinTokenPrefix)
	if !ok {
		return "", "", ErrBadJoinToken
	}
	id, secret, ok = strings.Cut(rest, ".")
	if !ok || len(id) != 16 || secret == "" {
		return "", "", ErrBadJoinToken
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", "", ErrBadJoinToken
	}
	return id, secret, nil
}
