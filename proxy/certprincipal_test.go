package proxy

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Client certificates map to principals by subject over a real TLS
// handshake: a mapped certificate acts with its rule's role (allowed on
// its topics, PermissionDenied beyond them), a certificate of the client
// CA that no rule maps authenticates nobody, and a bearer token on the
// same connection is judged by the token.
func TestClientCertificatesMapToPrincipals(t *testing.T) {
	public := tlstest.NewCA(t, "public")
	serverFiles := public.Issue(t.TempDir(), "proxy")
	srv, leader, _ := startClusterWith(t, nil, func(c *Config) {
		c.Auth.Enabled = true
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = serverFiles.CertFile, serverFiles.KeyFile, public.CAFile
		c.Auth.CertPrincipals = []CertPrincipal{{Subject: "^CN=(billing-[a-z]+)$", Principal: "$1", Role: "demo"}}
	})
	leader.auth.set(func(st *brokerv1.AuthState) {
		st.Tokens = []*brokerv1.AuthToken{tokenOf("root", adminSecret, "admin", time.Time{})}
		st.Roles = []*brokerv1.AuthRole{{Name: "demo", Grants: []*brokerv1.AuthGrant{{Permission: "publish", Pattern: "w*"}}}}
		st.ReceiptKeys = []*brokerv1.AuthReceiptKey{{Id: 1, Secret: bytes.Repeat([]byte{1}, 32)}}
	})
	dial := func(cn string) *grpc.ClientConn {
		src, err := tlsfiles.New("client", public.Issue(t.TempDir(), cn), 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(src.ClientConfig())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	mapped, unmapped := dial("billing-eu"), dial("someone")
	waitFor(t, "the proxy learns the roles", func() bool {
		return publish(t.Context(), mapped, "wide") == nil
	})
	if err := publish(t.Context(), mapped, "orders"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("mapped certificate publishing outside its role: %v, want PermissionDenied", err)
	}
	if err := publish(t.Context(), unmapped, "wide"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("certificate no rule maps: %v, want Unauthenticated", err)
	}
	if err := publish(bearer(t.Context(), adminSecret), unmapped, "orders"); err != nil {
		t.Errorf("admin token over an unmapped certificate: %v, want allowed", err)
	}
	if err := publish(bearer(t.Context(), "nope-nope-nope-nope-nope-nope-nope-nope"), mapped, "wide"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a bad token over a mapped certificate: %v, want Unauthenticated (the token decides)", err)
	}
}
