// Package tlstest issues real certificates for tests: a CA and leaf
// certificates for 127.0.0.1 and localhost, written as PEM files, with or
// without the URI SAN of a broker, proxy or admin principal.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// CA is a certificate authority whose certificate is in CAFile.
type CA struct {
	t      testing.TB
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	CAFile string
}

// NewCA creates a CA named name with its files in a new temporary dir.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.CAFile = filepath.Join(ca.dir, "ca.pem")
	write(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Issue writes a certificate for common name cn, valid for 127.0.0.1 and
// localhost as a server and a client, and its key into dir as cn.pem and
// cn-key.pem (replacing them if present), and returns the files with the
// CA's file. The certificate names no principal (see tlsfiles.PrincipalOf).
func (ca *CA) Issue(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, nil)
}

// Broker is Issue for a broker's certificate: it also carries the URI SAN
// spiffe://sundial/broker/<cn>, as docs/security.md says to issue one.
func (ca *CA) Broker(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, mustURL(ca.t, tlsfiles.PrincipalURI(tlsfiles.KindBroker, cn)))
}

// Proxy is Issue for a proxy's certificate (URI SAN
// spiffe://sundial/proxy/<cn>).
func (ca *CA) Proxy(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, mustURL(ca.t, tlsfiles.PrincipalURI(tlsfiles.KindProxy, cn)))
}

// Admin is Issue for an operator tool's certificate (URI SAN
// spiffe://sundial/admin/<cn>).
func (ca *CA) Admin(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, mustURL(ca.t, tlsfiles.PrincipalURI(tlsfiles.KindAdmin, cn)))
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (ca *CA) issue(dir, cn string, principal *url.URL) tlsfiles.Files {
	t := ca.t
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	if principal != nil {
		tmpl.URIs = []*url.URL{principal}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := tlsfiles.Files{CertFile: filepath.Join(dir, cn+".pem"), KeyFile: filepath.Join(dir, cn+"-key.pem"), CAFile: ca.CAFile}
	write(t, f.KeyFile, "PRIVATE KEY", keyDER)
	write(t, f.CertFile, "CERTIFICATE", der)
	return f
}

// write replaces path by a new file (a rename, as a rotation does).
func write(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
