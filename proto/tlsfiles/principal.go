package tlsfiles

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// The principals of cluster certificates. A certificate of the cluster CA
// names what it was issued to with one URI SAN
// spiffe://sundial/<kind>/<name>: a broker's kind is "broker" (its name,
// by convention, the node id; brokers may share one certificate), a
// proxy's "proxy", an operator's tool's "admin". The identity of an
// internal caller is taken from its verified certificate, never from a
// header.
const (
	// TrustDomain is the host part of every principal URI.
	TrustDomain = "sundial"

	KindBroker = "broker"
	KindProxy  = "proxy"
	KindAdmin  = "admin"
)

// Principal is who a verified certificate was issued to.
type Principal struct {
	Kind string // KindBroker, KindProxy, KindAdmin; empty if the certificate names none
	Name string
}

// String is the principal's URI, or "unnamed" for a certificate without one.
func (p Principal) String() string {
	if p.Kind == "" {
		return "unnamed"
	}
	return PrincipalURI(p.Kind, p.Name)
}

// PrincipalURI is the URI SAN naming kind/name, e.g.
// spiffe://sundial/broker/3.
func PrincipalURI(kind, name string) string {
	return (&url.URL{Scheme: "spiffe", Host: TrustDomain, Path: "/" + kind + "/" + name}).String()
}

// PrincipalOf reads the principal from a certificate's URI SANs: the first
// spiffe://sundial/<kind>/<name> with a known kind and a non-empty name.
// A certificate with none has the zero Principal (no kind): it may still
// be of the cluster CA, but it is no broker's, proxy's or admin's.
func PrincipalOf(cert *x509.Certificate) Principal {
	for _, u := range cert.URIs {
		if p, err := parsePrincipal(u); err == nil {
			return p
		}
	}
	return Principal{}
}

func parsePrincipal(u *url.URL) (Principal, error) {
	if u.Scheme != "spiffe" || u.Host != TrustDomain {
		return Principal{}, fmt.Errorf("tlsfiles: %s is not a spiffe://%s URI", u, TrustDomain)
	}
	kind, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	switch {
	case !ok || name == "" || strings.Contains(name, "/"):
		return Principal{}, fmt.Errorf("tlsfiles: %s: want spiffe://%s/<kind>/<name>", u, TrustDomain)
	case kind != KindBroker && kind != KindProxy && kind != KindAdmin:
		return Principal{}, fmt.Errorf("tlsfiles: %s: unknown kind %q", u, kind)
	}
	return Principal{Kind: kind, Name: name}, nil
}
