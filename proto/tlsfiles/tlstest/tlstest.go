// Package tlstest issues real certificates for tests: a CA (package
// devca) and leaf certificates for 127.0.0.1 and localhost, written as PEM
// files, with or without the URI SAN of a broker, proxy or admin
// principal; a failed step fails the test.
package tlstest

import (
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/devca"
)

// CA is a certificate authority; CAFile is the root's certificate and
// SignerFile its own (the same file for a root).
type CA struct {
	t          testing.TB
	ca         *devca.CA
	CAFile     string
	SignerFile string
}

// NewCA creates a CA named name with its files in a new temporary dir;
// it and what it issues are valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := devca.New(t.TempDir(), name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{t: t, ca: ca, CAFile: ca.CAFile, SignerFile: ca.SignerFile}
}

// Intermediate creates a CA named name signed by ca, with its files in a
// new temporary dir: the certificates it issues verify against ca's
// CAFile and against its own SignerFile (see devca.CA.Intermediate).
func (ca *CA) Intermediate(name string) *CA {
	ca.t.Helper()
	sub, err := ca.ca.Intermediate(ca.t.TempDir(), name)
	if err != nil {
		ca.t.Fatal(err)
	}
	return &CA{t: ca.t, ca: sub, CAFile: sub.CAFile, SignerFile: sub.SignerFile}
}

// Issue writes a certificate for common name cn, valid for 127.0.0.1 and
// localhost as a server and a client, and its key into dir as cn.pem and
// cn-key.pem (replacing them if present), and returns the files with the
// CA's file. The certificate names no principal (see tlsfiles.PrincipalOf).
func (ca *CA) Issue(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn)
}

// Broker is Issue for a broker's certificate: it also carries the URI SAN
// spiffe://sundial/broker/<cn>, as docs/security.md says to issue one.
func (ca *CA) Broker(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, tlsfiles.PrincipalURI(tlsfiles.KindBroker, cn))
}

// Proxy is Issue for a proxy's certificate (URI SAN
// spiffe://sundial/proxy/<cn>).
func (ca *CA) Proxy(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, tlsfiles.PrincipalURI(tlsfiles.KindProxy, cn))
}

// Admin is Issue for an operator tool's certificate (URI SAN
// spiffe://sundial/admin/<cn>).
func (ca *CA) Admin(dir, cn string) tlsfiles.Files {
	ca.t.Helper()
	return ca.issue(dir, cn, tlsfiles.PrincipalURI(tlsfiles.KindAdmin, cn))
}

func (ca *CA) issue(dir, cn string, uris ...string) tlsfiles.Files {
	ca.t.Helper()
	f, err := ca.ca.Issue(dir, cn, uris...)
	if err != nil {
		ca.t.Fatal(err)
	}
	return f
}
