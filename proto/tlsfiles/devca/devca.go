// Package devca is a certificate authority for development clusters,
// benchmarks and tests: it creates a CA, keeps its certificate and key as
// PEM files in a directory, and issues leaf certificates for loopback
// (127.0.0.1 and localhost), usable as server and client certificates,
// with optional URI SANs (the identity of a cluster member). A CA can make
// an intermediate one (Intermediate): what it issues verifies against the
// root's file and against the intermediate's own, which is how brokers'
// Raft transport tells broker certificates from the others. It is not an
// operator's PKI: keys are unencrypted files, certificates short-lived.
//
// Nothing here is safe for concurrent Issue calls writing the same files.
package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
)

// File names of the CA inside its directory.
const (
	CertFileName = "ca.pem"
	KeyFileName  = "ca-key.pem"
)

// CA is a certificate authority. CAFile is the root's certificate, the
// trust anchor its certificates verify against; SignerFile is its own
// (the same file for a root).
type CA struct {
	CAFile     string
	SignerFile string
	cert       *x509.Certificate
	key        *ecdsa.PrivateKey
	validFor   time.Duration
	// chain are the intermediate certificates (DER) between the ones it
	// issues and the root, nearest first; empty for a root.
	chain [][]byte
}

// New creates a CA named name, valid for validFor, and writes its
// certificate and key into dir (created if needed). Certificates it
// issues are valid for validFor too.
func New(dir, name string, validFor time.Duration) (*CA, error) {
	if validFor <= 0 {
		return nil, fmt.Errorf("devca: validity %v is not positive", validFor)
	}
	return create(dir, name, validFor, nil)
}

// Intermediate creates a CA named name signed by ca, valid as long as
// what ca issues, and writes its certificate and key into dir (created if
// needed). The certificate files it issues hold the leaf and then the
// intermediate, so they verify against ca's CAFile; a peer trusting only
// the intermediate's SignerFile takes them and nothing else ca issues.
func (ca *CA) Intermediate(dir, name string) (*CA, error) {
	return create(dir, name, ca.validFor, ca)
}

// create makes a CA signed by parent, or a root when parent is nil.
func create(dir, name string, validFor time.Duration, parent *CA) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, fmt.Errorf("devca: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	own := filepath.Join(dir, CertFileName)
	ca := &CA{CAFile: own, SignerFile: own, cert: cert, key: key, validFor: validFor}
	if parent != nil {
		ca.CAFile = parent.CAFile
		ca.chain = append([][]byte{der}, parent.chain...)
	}
	if err := Write(filepath.Join(dir, KeyFileName), "PRIVATE KEY", keyDER); err != nil {
		return nil, err
	}
	if err := Write(own, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Load reads the root CA New wrote into dir; certificates it issues are
// valid for validFor.
func Load(dir string, validFor time.Duration) (*CA, error) {
	cert, key, err := read(dir)
	if err != nil {
		return nil, err
	}
	own := filepath.Join(dir, CertFileName)
	return &CA{CAFile: own, SignerFile: own, cert: cert, key: key, validFor: validFor}, nil
}

// LoadIntermediate reads the CA ca.Intermediate wrote into dir.
func (ca *CA) LoadIntermediate(dir string) (*CA, error) {
	cert, key, err := read(dir)
	if err != nil {
		return nil, err
	}
	if err := cert.CheckSignatureFrom(ca.cert); err != nil {
		return nil, fmt.Errorf("devca: %s in %s is not signed by %s: %w", CertFileName, dir, ca.SignerFile, err)
	}
	return &CA{
		CAFile: ca.CAFile, SignerFile: filepath.Join(dir, CertFileName), cert: cert, key: key, validFor: ca.validFor,
		chain: append([][]byte{cert.Raw}, ca.chain...),
	}, nil
}

// read parses the certificate and key files in dir.
func read(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFileName))
	if err != nil {
		return nil, nil, fmt.Errorf("devca: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFileName))
	if err != nil {
		return nil, nil, fmt.Errorf("devca: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("devca: %s or %s in %s is not PEM", CertFileName, KeyFileName, dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: %s: %w", CertFileName, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: %s: %w", KeyFileName, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("devca: %s holds a %T, want an ECDSA key", KeyFileName, k)
	}
	return cert, key, nil
}

// Issue writes a certificate for common name cn, valid for 127.0.0.1 and
// localhost as a server and a client and carrying uris as URI SANs, and
// its key into dir as cn.pem and cn-key.pem (replacing them if present:
// a rename, as a rotation does), and returns the files with the root's.
// The certificate file holds the leaf, then the CA's chain to the root.
func (ca *CA) Issue(dir, cn string, uris ...string) (tlsfiles.Files, error) {
	var us []*url.URL
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" {
			return tlsfiles.Files{}, fmt.Errorf("devca: URI SAN %q is not an absolute URI", s)
		}
		us = append(us, u)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tlsfiles.Files{}, fmt.Errorf("devca: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return tlsfiles.Files{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(ca.validFor),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		URIs: us,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tlsfiles.Files{}, fmt.Errorf("devca: issue %s: %w", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return tlsfiles.Files{}, fmt.Errorf("devca: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tlsfiles.Files{}, fmt.Errorf("devca: %w", err)
	}
	f := tlsfiles.Files{CertFile: filepath.Join(dir, cn+".pem"), KeyFile: filepath.Join(dir, cn+"-key.pem"), CAFile: ca.CAFile}
	if err := Write(f.KeyFile, "PRIVATE KEY", keyDER); err != nil {
		return tlsfiles.Files{}, err
	}
	if err := Write(f.CertFile, "CERTIFICATE", append([][]byte{der}, ca.chain...)...); err != nil {
		return tlsfiles.Files{}, err
	}
	return f, nil
}

// Write replaces path by a PEM file of one block of type typ per der, in
// order (through a rename, so a reader never sees half a file), readable
// by its owner only.
func Write(path, typ string, der ...[]byte) error {
	var out []byte
	for _, d := range der {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: d})...)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("devca: %w", err), os.Remove(tmp))
	}
	return nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("devca: serial: %w", err)
	}
	return n, nil
}
