package command

import (
	"crypto/tls"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// shardctl reaches a proxy that serves TLS and requires a client
// certificate with --cacert, --cert and --key, and not without them.
func TestTLSFlags(t *testing.T) {
	ca := tlstest.NewCA(t, "public")
	src, err := tlsfiles.New("client", ca.Issue(t.TempDir(), "proxy"), 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(src.ServerConfig(tls.RequireAndVerifyClientCert, "h2"))))
	sundialv1.RegisterAdminServer(s, fakeServer{})
	sundialv1.RegisterProducerServer(s, fakeServer{})
	sundialv1.RegisterClusterServer(s, fakeOperations{})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	addr := lis.Addr().String()
	user := ca.Issue(t.TempDir(), "operator")
	for _, tc := range []cliCase{
		{"tls with a client certificate", []string{"--proxy", addr, "--cacert", ca.CAFile, "--cert", user.CertFile, "--key", user.KeyFile, "status", "-o", "json"}, ExitOK, `"routing_version": 42`, ""},
		{"a command's own --key is not the TLS key", []string{"--proxy", addr, "--cacert", ca.CAFile, "--cert", user.CertFile, "--key", user.KeyFile, "publish", "--topic", "t", "--key", "k1", "a"}, ExitOK, "id-a", ""},
		{"tls without a client certificate", []string{"--proxy", addr, "--cacert", ca.CAFile, "--timeout", "2s", "status"}, ExitFailure, "", ""},
		{"plaintext", []string{"--proxy", addr, "--timeout", "2s", "status"}, ExitFailure, "", ""},
		{"cert without key", []string{"--proxy", addr, "--cacert", ca.CAFile, "--cert", user.CertFile, "status"}, ExitUsage, "", "--cert and --key"},
		{"missing CA file", []string{"--proxy", addr, "--cacert", ca.CAFile + ".missing", "status"}, ExitFailure, "", "ca.pem.missing"},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.checkRun(t, "", tc.args) })
	}
}
