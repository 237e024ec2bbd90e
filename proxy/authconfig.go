package proxy

import (
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/sundialmq/sundial/proxy/internal/auth"
)

// AuthConfig turns authentication and authorization on (docs/security.md).
// YAML: the auth section.
type AuthConfig struct {
	// Enabled makes every call name a principal (a bearer token, or a
	// client certificate a CertPrincipals rule maps) whose role allows it:
	// Unauthenticated (HTTP 401) without one, PermissionDenied (403) when
	// the role lacks the permission; receipts are signed. Default false:
	// every call is allowed, as before authentication existed.
	Enabled bool
	// BootstrapTokenFile names a file holding the first admin token's
	// secret (one line, at least 32 characters): at start the proxy asks
	// the cluster to store it as the token "bootstrap" with the admin
	// role, once per cluster: after the first time (even once revoked) it
	// changes nothing. Default empty.
	BootstrapTokenFile string
	// CertPrincipals map verified client certificates (tls_client_ca_file)
	// to principals, first match wins; a call with a bearer token is
	// judged by the token. Default none: certificates alone authenticate
	// nobody.
	CertPrincipals []CertPrincipal
}

// CertPrincipal is one certificate mapping rule.
type CertPrincipal struct {
	// Subject is a regular expression matched against the certificate's
	// subject in RFC 2253 form, e.g. "^CN=([^,]+),O=Acme$".
	Subject string
	// Principal is the principal's name, with $1... from Subject's match,
	// e.g. "$1".
	Principal string
	// Role is the role the principal has: admin or a stored role.
	Role string
}

func (c AuthConfig) validate() []error {
	var errs []error
	if (c.BootstrapTokenFile != "" || len(c.CertPrincipals) > 0) && !c.Enabled {
		errs = append(errs, errors.New("auth: bootstrap_token_file and cert_principals need auth.enabled"))
	}
	for i, r := range c.CertPrincipals {
		if _, err := regexp.Compile(r.Subject); err != nil || r.Subject == "" {
			errs = append(errs, fmt.Errorf("auth.cert_principals[%d].subject: want a regular expression, got %q", i, r.Subject))
		}
		if r.Principal == "" || r.Role == "" {
			errs = append(errs, fmt.Errorf("auth.cert_principals[%d]: principal and role are required", i))
		}
	}
	return errs
}

func (c AuthConfig) certRules() []auth.CertRule {
	var out []auth.CertRule
	for _, r := range c.CertPrincipals {
		out = append(out, auth.CertRule{Subject: regexp.MustCompile(r.Subject), Principal: r.Principal, Role: r.Role})
	}
	return out
}

// bootstrapSecret reads BootstrapTokenFile; "" when none is set.
func (c AuthConfig) bootstrapSecret() (string, error) {
	if c.BootstrapTokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.BootstrapTokenFile)
	if err != nil {
		return "", fmt.Errorf("auth.bootstrap_token_file: %w", err)
	}
	s, err := auth.BootstrapSecret(b)
	if err != nil {
		return "", fmt.Errorf("auth.bootstrap_token_file %s: %w", c.BootstrapTokenFile, err)
	}
	return s, nil
}
