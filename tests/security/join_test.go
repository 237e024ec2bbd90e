package security

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/tlsfiles"
	"github.com/sundialmq/sundial/proto/tlsfiles/tlstest"
	"github.com/sundialmq/sundial/tests/framework"
)

// On a cluster serving TLS a broker joins only with a broker certificate
// of the cluster CA and a valid join token. Rogue joins — no certificate,
// a broker certificate but no token, a proxy's certificate with a good
// token, an expired token, a spent single-use token, a made-up token —
// are each refused with their code, register nothing, spend nothing and
// name neither the cluster id nor a node id; a broker process started
// with the token file is admitted, and the refusals are counted.
func TestJoinsNeedABrokerCertificateAndAToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ca := tlstest.NewCA(t, "cluster")
	dir := t.TempDir()
	broker := ca.Broker(dir, "broker")
	proxy := ca.Proxy(t.TempDir(), "proxy")
	c := framework.NewCluster(t, framework.Config{
		Brokers:      1,
		Shards:       2,
		BrokerArgs:   args("--tls", broker),
		ProxyArgs:    args("--cluster", proxy),
		BrokerCAFile: ca.CAFile,
	})
	clusterID := clusterIDOf(t, c.Brokers[0].DataDir)

	// Tokens are made through the proxy (shardctl join-token create does).
	pconn, err := grpc.NewClient(c.Proxies[0].GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer pconn.Close()
	admin := sundialv1.NewClusterClient(pconn)
	create := func(req *sundialv1.CreateJoinTokenRequest) *sundialv1.CreateJoinTokenResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		resp, err := admin.CreateJoinToken(ctx, req)
		if err != nil {
			t.Fatalf("CreateJoinToken(%v): %v", req, err)
		}
		return resp
	}
	good := create(&sundialv1.CreateJoinTokenRequest{Uses: 1})
	expired := create(&sundialv1.CreateJoinTokenRequest{ExpiresInMs: 1, Uses: 5})
	if _, err := admin.CreateJoinToken(t.Context(), &sundialv1.CreateJoinTokenRequest{Uses: 5000}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateJoinToken(uses 5000) = %v, want InvalidArgument", err)
	}
	// The expired token is past its expiry by the broker's clock (1 ms
	// after its creation) once the list says so.
	for deadline := time.Now().Add(time.Minute); ; {
		list, err := admin.ListJoinTokens(t.Context(), &sundialv1.ListJoinTokensRequest{})
		if err == nil && len(list.GetTokens()) == 2 && tokenByID(list, expired.GetToken().GetId()).GetExpired() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListJoinTokens never listed the 1 ms token as expired (last: %v, %v)", list, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	creds := func(f tlsfiles.Files) credentials.TransportCredentials {
		src, err := tlsfiles.New("cluster", f, 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return credentials.NewTLS(src.ClientConfig())
	}
	join := func(cr credentials.TransportCredentials, token string) error {
		conn, err := grpc.NewClient(c.Brokers[0].GRPCAddr, grpc.WithTransportCredentials(cr))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		_, err = sundialv1.NewClusterClient(conn).JoinCluster(ctx, &sundialv1.JoinClusterRequest{
			RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Incarnation: fmt.Sprintf("rogue-%d", time.Now().UnixNano()), JoinToken: token,
		})
		return err
	}
	rogueBroker := ca.Broker(t.TempDir(), "rogue")
	refused := func(name string, err error, code codes.Code, says string) {
		t.Helper()
		if status.Code(err) != code {
			t.Errorf("%s: %v, want %s", name, err, code)
			return
		}
		msg := status.Convert(err).Message()
		if says != "" && !strings.Contains(msg, says) {
			t.Errorf("%s: %q, want it to say %q", name, msg, says)
		}
		if strings.Contains(msg, clusterID) || strings.Contains(msg, "node 1") {
			t.Errorf("%s: the refusal %q names the cluster or a node", name, msg)
		}
	}
	noCert := join(creds(tlsfiles.Files{CAFile: ca.CAFile}), good.GetSecret())
	if noCert == nil || status.Code(noCert) == codes.OK {
		t.Errorf("a join without a certificate was answered, want the handshake refused")
	} else if strings.Contains(noCert.Error(), clusterID) {
		t.Errorf("the refusal %v names the cluster", noCert)
	}
	refused("a broker certificate without a token", join(creds(rogueBroker), ""), codes.PermissionDenied, "no join token")
	refused("a proxy certificate with a good token", join(creds(proxy), good.GetSecret()), codes.PermissionDenied, "broker's certificate")
	refused("an expired token", join(creds(rogueBroker), expired.GetSecret()), codes.PermissionDenied, "expired")
	refused("a made-up token", join(creds(rogueBroker), "sdjt.0123456789abcdef.guess"), codes.PermissionDenied, "not one of this cluster's")
	refused("a token of the wrong shape", join(creds(rogueBroker), "guess"), codes.PermissionDenied, "not one of this cluster's")
	nodes := func() int {
		t.Helper()
		info, err := c.ClusterInfo()
		if err != nil {
			t.Fatal(err)
		}
		return len(info.GetNodes())
	}
	if n := nodes(); n != 1 {
		t.Fatalf("after the refused joins ClusterInfo lists %d nodes, want 1", n)
	}

	// A broker process with the good token joins (the proxy's attempt
	// did not spend it), and the token is then spent.
	tokenFile := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(tokenFile, []byte(good.GetSecret()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := c.Join(2*time.Minute, "--join-token-file", tokenFile)
	if err != nil {
		t.Fatalf("a broker with a broker certificate and the token: %v, want it to join", err)
	}
	if n := nodes(); n != 2 {
		t.Fatalf("after the good join ClusterInfo lists %d nodes, want 2", n)
	}
	refused("a spent single-use token", join(creds(rogueBroker), good.GetSecret()), codes.PermissionDenied, "admitted all")
	list, err := admin.ListJoinTokens(t.Context(), &sundialv1.ListJoinTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if tok := tokenByID(list, good.GetToken().GetId()); !tok.GetSpent() || len(tok.GetNodeIds()) != 1 || tok.GetNodeIds()[0] != uint64(id) {
		t.Errorf("the used token is listed as %v, want spent by node %d", tok, id)
	}
	if n := nodes(); n != 2 {
		t.Errorf("after the spent-token join ClusterInfo lists %d nodes, want 2", n)
	}
	if _, err := admin.RevokeJoinToken(t.Context(), &sundialv1.RevokeJoinTokenRequest{Id: expired.GetToken().GetId()}); err != nil {
		t.Errorf("RevokeJoinToken: %v", err)
	}
	if _, err := admin.RevokeJoinToken(t.Context(), &sundialv1.RevokeJoinTokenRequest{Id: expired.GetToken().GetId()}); status.Code(err) != codes.NotFound {
		t.Errorf("RevokeJoinToken of a revoked token: %v, want NotFound", err)
	}

	page := scrape(t, c, c.Brokers[0])
	for _, reason := range []string{"no_token", "not_broker", "expired_token", "bad_token", "spent_token"} {
		if !strings.Contains(page, fmt.Sprintf(`sundial_broker_refused_total{reason=%q}`, reason)) {
			t.Errorf("broker 1's metrics lack sundial_broker_refused_total{reason=%q}", reason)
		}
	}
}

// clusterIDOf reads the cluster id from a broker's identity file.
func clusterIDOf(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal(b, &id); err != nil || id.ClusterID == "" {
		t.Fatalf("identity.json %s: %v, no cluster id", b, err)
	}
	return id.ClusterID
}

func tokenByID(list *sundialv1.ListJoinTokensResponse, id string) *sundialv1.JoinToken {
	for _, tok := range list.GetTokens() {
		if tok.GetId() == id {
			return tok
		}
	}
	return nil
}
