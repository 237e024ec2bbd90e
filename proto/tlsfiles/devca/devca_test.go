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

// What an intermediate CA issues verifies against the root's file (the
// certificate file carries the intermediate) and against the
// intermediate's own file; what the root issues verifies only against the
// root's. Brokers' Raft transport relies on the difference.
func TestIntermediate(t *testing.T) {
	root, err := New(t.TempDir(), "root", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	subDir := t.TempDir()
	if _, err := root.Intermediate(subDir, "brokers"); err != nil {
		t.Fatalf("Intermediate() error = %v", err)
	}
	sub, err := root.LoadIntermediate(subDir)
	if err != nil {
		t.Fatalf("LoadIntermediate() error = %v", err)
	}
	other, err := New(t.TempDir(), "other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.LoadIntermediate(subDir); err == nil {
		t.Error("LoadIntermediate() by a CA that did not sign it: error = nil, want one")
	}
	if sub.CAFile != root.CAFile || sub.SignerFile == root.CAFile {
		t.Fatalf("intermediate CAFile, SignerFile = %s, %s; want the root's file, then its own", sub.CAFile, sub.SignerFile)
	}
	broker, err := sub.Issue(t.TempDir(), "broker-1")
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := root.Issue(t.TempDir(), "proxy-1")
	if err != nil {
		t.Fatal(err)
	}
	verify := func(certFile, keyFile, anchorFile string) error {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatalf("LoadX509KeyPair(%s) error = %v", certFile, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		inter := x509.NewCertPool()
		for _, der := range pair.Certificate[1:] {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			inter.AddCert(c)
		}
		anchor, err := os.ReadFile(anchorFile)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(anchor)
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	if err := verify(broker.CertFile, broker.KeyFile, root.CAFile); err != nil {
		t.Errorf("intermediate's leaf against the root: %v, want verified", err)
	}
	if err := verify(broker.CertFile, broker.KeyFile, sub.SignerFile); err != nil {
		t.Errorf("intermediate's leaf against the intermediate: %v, want verified", err)
	}
	if err := verify(proxy.CertFile, proxy.KeyFile, sub.SignerFile); err == nil {
		t.Error("root's leaf verified against the intermediate, want refused")
	}
}
