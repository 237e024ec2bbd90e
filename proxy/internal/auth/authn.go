package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// CertRule maps a client certificate to a principal, Kafka-style: the
// first rule whose Subject matches the certificate's subject (RFC 2253
// form, e.g. "CN=billing,O=Acme") names the principal (Principal, with
// $1... from the match) and its role.
type CertRule struct {
	Subject   *regexp.Regexp
	Principal string
	Role      string
}

// Principal is who makes a call.
type Principal struct {
	// Name is the token's name or the mapped certificate name.
	Name string
	// Kind is "token" or "certificate".
	Kind string
	Role string
	// token is the hash of the bearer token, zero for certificates: a
	// stream re-checks it at every change of the state.
	token     [sha256.Size]byte
	expiresAt time.Time
}

// Errors of authentication; each is Unauthenticated (HTTP 401).
var (
	errNoCredential = status.Error(codes.Unauthenticated, "authentication required: send authorization: Bearer <token>")
	errBadToken     = status.Error(codes.Unauthenticated, "invalid or revoked token")
	errExpired      = status.Error(codes.Unauthenticated, "token expired")
	errBadScheme    = status.Error(codes.Unauthenticated, "authorization must be: Bearer <token>")
	errNoState      = status.Error(codes.Unavailable, "auth: no auth state received from any broker yet")
)

// Authenticator finds the principal of a call.
type Authenticator struct {
	store *Store
	rules []CertRule
	now   func() time.Time
}

// NewAuthenticator decides from store's tokens and the certificate rules.
func NewAuthenticator(store *Store, rules []CertRule, now func() time.Time) *Authenticator {
	if now == nil {
		now = time.Now
	}
	return &Authenticator{store: store, rules: rules, now: now}
}

// Authenticate answers the principal of ctx's call: its bearer token, or
// else its verified client certificate mapped by the rules.
func (a *Authenticator) Authenticate(ctx context.Context) (*Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if vals := md.Get("authorization"); len(vals) > 0 {
		scheme, secret, ok := strings.Cut(vals[0], " ")
		if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(secret) == "" {
			return nil, errBadScheme
		}
		return a.token(strings.TrimSpace(secret))
	}
	if p := a.certificate(ctx); p != nil {
		return p, nil
	}
	return nil, errNoCredential
}

// token looks the secret's SHA-256 up. The map lookup is keyed by the
// hash, which tells an attacker nothing of a secret; the stored hash is
// then compared in constant time.
func (a *Authenticator) token(secret string) (*Principal, error) {
	snap := a.store.Snapshot()
	if snap == nil {
		return nil, errNoState
	}
	sum := sha256.Sum256([]byte(secret))
	t, ok := snap.tokens[sum]
	if !ok || subtle.ConstantTimeCompare(t.hash[:], sum[:]) != 1 {
		return nil, errBadToken
	}
	if !t.expiresAt.IsZero() && !a.now().Before(t.expiresAt) {
		return nil, errExpired
	}
	return &Principal{Name: t.name, Kind: "token", Role: t.role, token: sum, expiresAt: t.expiresAt}, nil
}

func (a *Authenticator) certificate(ctx context.Context) *Principal {
	if len(a.rules) == 0 {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return nil // no certificate, or one the handshake did not verify
	}
	return MapCertificate(a.rules, ti.State.VerifiedChains[0][0])
}

// MapCertificate applies the first rule matching cert's subject; nil when
// none does.
func MapCertificate(rules []CertRule, cert *x509.Certificate) *Principal {
	subject := cert.Subject.String()
	for _, r := range rules {
		m := r.Subject.FindStringSubmatchIndex(subject)
		if m == nil {
			continue
		}
		name := string(r.Subject.ExpandString(nil, r.Principal, subject, m))
		return &Principal{Name: name, Kind: "certificate", Role: r.Role}
	}
	return nil
}

// stillValid re-checks a principal against the current state: a token
// revoked or expired since the call began is refused.
func (a *Authenticator) stillValid(p *Principal) error {
	if p.Kind != "token" {
		return nil
	}
	snap := a.store.Snapshot()
	if t, ok := snap.tokens[p.token]; !ok || t.name != p.Name {
		return errBadToken
	}
	if !p.expiresAt.IsZero() && !a.now().Before(p.expiresAt) {
		return errExpired
	}
	return nil
}

// allows says p's role grants perm on topic (Any: some permission).
func (p *Principal) allows(snap *Snapshot, perm Permission, topic string) bool {
	for _, g := range snap.grants(p.Role) {
		if (perm == Any || g.perm == perm) && g.matches(topic) {
			return true
		}
	}
	return false
}

// denied is the PermissionDenied answer: the permission and the topic the
// call named, nothing about which topics exist.
func denied(perm Permission, topic string) error {
	if topic == "" {
		return status.Errorf(codes.PermissionDenied, "permission denied: %s needed", perm)
	}
	if perm == Any {
		return status.Errorf(codes.PermissionDenied, "permission denied: no permission on topic %q", topic)
	}
	return status.Errorf(codes.PermissionDenied, "permission denied: %s needed on topic %q", perm, topic)
}

// ErrBootstrapFile explains a bootstrap token file that cannot be used.
var ErrBootstrapFile = errors.New("auth: bootstrap token file")

// BootstrapSecret checks the bootstrap file's content: at least 32
// characters of one line.
func BootstrapSecret(content []byte) (string, error) {
	s := strings.TrimSpace(string(content))
	if len(s) < 32 || strings.ContainsAny(s, " \t\r\n") {
		return "", fmt.Errorf("%w: want one line of at least 32 characters without spaces (e.g. openssl rand -base64 32)", ErrBootstrapFile)
	}
	return s, nil
}

// Hash is the SHA-256 a token's secret is stored as.
func Hash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}
