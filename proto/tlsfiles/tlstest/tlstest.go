// Package tlstest issues real certificates for tests: a CA (package
// devca) and leaf certificates for 127.0.0.1 and localhost, written as PEM
// files, with a failed step failing the test.
package tlstest

import (
	"testing"
	"time"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/devca"
)

// CA is a certificate authority whose certificate is in CAFile.
type CA struct {
	t      testing.TB
	ca     *devca.CA
	CAFile string
}

// NewCA creates a CA named name with its files in a new temporary dir;
// it and what it issues are valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := devca.New(t.TempDir(), name, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{t: t, ca: ca, CAFile: ca.CAFile}
}

// Issue writes a certificate for common name cn, valid for 127.0.0.1 and
// localhost as a server and a client and carrying uris as URI SANs, and
// its key into dir as cn.pem and cn-key.pem (replacing them if present),
// and returns the files with the CA's file.
func (ca *CA) Issue(dir, cn string, uris ...string) tlsfiles.Files {
	ca.t.Helper()
	f, err := ca.ca.Issue(dir, cn, uris...)
	if err != nil {
		ca.t.Fatal(err)
	}
	return f
}
