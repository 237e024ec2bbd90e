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
	if args2[6] != "--tls-raft-ca-file" {
		t.Fatalf("brokerArgs() = %v, want --tls-raft-ca-file seventh", args2)
	}
	verify := func(pair tls.Certificate, caFile string) error {
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		inter := x509.NewCertPool()
		for _, der := range pair.Certificate[1:] {
			c, _ := x509.ParseCertificate(der)
			inter.AddCert(c)
		}
		pem, _ := os.ReadFile(caFile)
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	if err := verify(pair, args2[5]); err != nil {
		t.Errorf("broker-2 certificate does not verify against the CA: %v", err)
	}
	if err := verify(pair, args2[7]); err != nil {
		t.Errorf("broker-2 certificate does not verify against the Raft CA: %v", err)
	}
	proxyFiles, err := again.issue("proxy")
	if err != nil {
		t.Fatal(err)
	}
	proxyPair, err := tls.LoadX509KeyPair(proxyFiles.CertFile, proxyFiles.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(proxyPair, args2[7]); err == nil {
		t.Error("the proxy's certificate verifies against the Raft CA, want only broker certificates to")
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://sundial/broker/2" {
		t.Errorf("broker-2 certificate names %v, want spiffe://sundial/broker/2", leaf.URIs)
	}
	proxyArgs, err := again.proxyArgs()
	if err != nil || !strings.Contains(strings.Join(proxyArgs, " "), "--auth --bootstrap-token-file "+again.path(adminTokenFile)) {
		t.Errorf("proxyArgs() = %v, %v; want authentication with the admin token file", proxyArgs, err)
	}
}
