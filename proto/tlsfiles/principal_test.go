package tlsfiles_test

import (
	"crypto/x509"
	"net/url"
	"testing"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

func TestPrincipalOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		uris []string
		want tlsfiles.Principal
	}{
		{"broker", []string{"spiffe://sundial/broker/3"}, tlsfiles.Principal{Kind: "broker", Name: "3"}},
		{"proxy", []string{"spiffe://sundial/proxy/edge-1"}, tlsfiles.Principal{Kind: "proxy", Name: "edge-1"}},
		{"admin", []string{"spiffe://sundial/admin/ops"}, tlsfiles.Principal{Kind: "admin", Name: "ops"}},
		{"none", nil, tlsfiles.Principal{}},
		{"other trust domain", []string{"spiffe://example.org/broker/3"}, tlsfiles.Principal{}},
		{"other scheme", []string{"https://sundial/broker/3"}, tlsfiles.Principal{}},
		{"unknown kind", []string{"spiffe://sundial/client/3"}, tlsfiles.Principal{}},
		{"no name", []string{"spiffe://sundial/broker/"}, tlsfiles.Principal{}},
		{"nested name", []string{"spiffe://sundial/broker/a/b"}, tlsfiles.Principal{}},
		{"first good one", []string{"spiffe://sundial/nope/x", "spiffe://sundial/proxy/p"}, tlsfiles.Principal{Kind: "proxy", Name: "p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := &x509.Certificate{}
			for _, s := range tc.uris {
				u, err := url.Parse(s)
				if err != nil {
					t.Fatal(err)
				}
				cert.URIs = append(cert.URIs, u)
			}
			if got := tlsfiles.PrincipalOf(cert); got != tc.want {
				t.Errorf("PrincipalOf(%v) = %+v, want %+v", tc.uris, got, tc.want)
			}
		})
	}
	if got := tlsfiles.PrincipalURI("broker", "3"); got != "spiffe://sundial/broker/3" {
		t.Errorf("PrincipalURI(broker, 3) = %s", got)
	}
}
