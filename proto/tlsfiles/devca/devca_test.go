package devca

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// A CA loaded back from its directory issues certificates that verify
// against the CA file, as server and client, with their URI SANs.
func TestIssueAfterLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(dir, "dev", time.Hour); err != nil {
		t.Fatalf("New() error = %v", err)
	}
	ca, err := Load(dir, time.Hour)
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	f, err := ca.Issue(t.TempDir(), "broker-1", "spiffe://sundial/broker/1")
	if err != nil {
		t.Fatalf("Issue() error = %v", err)
	}
	pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		t.Fatalf("LoadX509KeyPair(issued) error = %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", f.CAFile)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("Verify(usage %v) error = %v", usage, err)
		}
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://sundial/broker/1" {
		t.Errorf("URI SANs = %v, want [spiffe://sundial/broker/1]", leaf.URIs)
	}
}

func TestRefusals(t *testing.T) {
	if _, err := New(t.TempDir(), "dev", 0); err == nil {
		t.Error("New(validity 0) error = nil, want one")
	}
	if _, err := Load(t.TempDir(), time.Hour); err == nil {
		t.Error("Load(empty dir) error = nil, want one")
	}
	ca, err := New(t.TempDir(), "dev", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(t.TempDir(), "x", "not a uri"); err == nil {
		t.Error("Issue(URI SAN \"not a uri\") error = nil, want one")
	}
}
