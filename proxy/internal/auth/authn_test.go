package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"regexp"
	"testing"
)

func TestMapCertificate(t *testing.T) {
	rules := []CertRule{
		{Subject: regexp.MustCompile(`^CN=([^,]+),O=Billing$`), Principal: "billing-$1", Role: "billing"},
		{Subject: regexp.MustCompile(`^CN=ops$`), Principal: "ops", Role: "admin"},
	}
	cases := []struct {
		subject          pkix.Name
		name, role, kind string
	}{
		{pkix.Name{CommonName: "worker-1", Organization: []string{"Billing"}}, "billing-worker-1", "billing", "certificate"},
		{pkix.Name{CommonName: "ops"}, "ops", "admin", "certificate"},
		{pkix.Name{CommonName: "stranger"}, "", "", ""},
		{pkix.Name{CommonName: "worker-1", Organization: []string{"Other"}}, "", "", ""},
	}
	for _, tc := range cases {
		p := MapCertificate(rules, &x509.Certificate{Subject: tc.subject})
		if tc.name == "" {
			if p != nil {
				t.Errorf("MapCertificate(%s) = %+v, want none", tc.subject, p)
			}
			continue
		}
		if p == nil || p.Name != tc.name || p.Role != tc.role || p.Kind != tc.kind {
			t.Errorf("MapCertificate(%s) = %+v, want %s with role %s", tc.subject, p, tc.name, tc.role)
		}
	}
}

func TestGrantMatches(t *testing.T) {
	cases := []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "a", true}, {"*", "", true}, {"demo*", "demo-1", true}, {"demo*", "dem", false},
		{"demo*", "", false}, {"orders", "orders", true}, {"orders", "orders2", false},
	}
	for _, tc := range cases {
		if got := (grant{Publish, tc.pattern}).matches(tc.topic); got != tc.want {
			t.Errorf("grant{%q}.matches(%q) = %v, want %v", tc.pattern, tc.topic, got, tc.want)
		}
	}
}
