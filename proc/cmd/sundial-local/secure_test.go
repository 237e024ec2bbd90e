package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
)

// A second secure start on the same data dir keeps the CA, the
// certificates and the admin token (a restart keeps its tokens); the
// certificates verify against the CA with the principals they name.
func TestPrepareSecureKeepsWhatExists(t *testing.T) {
	dir := t.TempDir()
	first, err := prepareSecure(dir)
	if err != nil {
		t.Fatalf("prepareSecure() error = %v", err)
	}
	args, err := first.brokerArgs(2)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(first.path(adminTokenFile))
	if err != nil || len(strings.TrimSpace(string(token))) < 32 {
		t.Fatalf("admin token %q, %v: want a secret of at least 32 characters", token, err)
	}
	cert, err := os.ReadFile(args[1])
	if err != nil {
		t.Fatal(err)
	}

	again, err := prepareSecure(dir)
	if err != nil {
		t.Fatalf("second prepareSecure() error = %v", err)
	}
	args2, err := again.brokerArgs(2)
	if err != nil {
		t.Fatal(err)
	}
	token2, _ := os.ReadFile(again.path(adminTokenFile))
	cert2, _ := os.ReadFile(args2[1])
	if string(token2) != string(token) || string(cert2) != string(cert) {
		t.Fatal("a second start replaced the admin token or the broker certificate")
	}

	pair, err := tls.LoadX509KeyPair(args2[1], args2[3])
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	pem, _ := os.ReadFile(args2[5])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("broker-2 certificate does not verify against the CA: %v", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://sundial/broker/2" {
		t.Errorf("broker-2 certificate names %v, want spiffe://sundial/broker/2", leaf.URIs)
	}
	proxyArgs, err := again.proxyArgs()
	if err != nil || !strings.Contains(strings.Join(proxyArgs, " "), "--auth --bootstrap-token-file "+again.path(adminTokenFile)) {
		t.Errorf("proxyArgs() = %v, %v; want authentication with the admin token file", proxyArgs, err)
	}
}
