package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proxy"
)

const bootstrapSecret = "bootstrap-secret-0123456789abcdef0123456789"

// authProxy starts a second proxy in front of c's brokers with
// authentication on and the bootstrap token file, and answers a
// connection to it.
func authProxy(t *testing.T, c *Cluster) (*prometheus.Registry, *grpc.ClientConn) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bootstrap-token")
	if err := os.WriteFile(file, []byte(bootstrapSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := proxy.DefaultConfig()
	pc.AdminAddr = ""
	pc.GRPCAddr, pc.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	pc.Brokers = nil
	for _, m := range c.members {
		pc.Brokers = append(pc.Brokers, m.GRPCAddr)
	}
	pc.Auth = proxy.AuthConfig{Enabled: true, BootstrapTokenFile: file}
	reg := prometheus.NewRegistry()
	p, err := proxy.New(pc, logger(t).Named("auth-proxy"), reg)
	if err != nil {
		t.Fatalf("proxy.New() = %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("proxy.Start() = %v", err)
	}
	t.Cleanup(p.Stop)
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return reg, conn
}

// auditCount is sundial_proxy_audit_events_total{action, outcome} in reg.
func auditCount(t *testing.T, reg *prometheus.Registry, action, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sundial_proxy_audit_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["action"] == action && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// tokenCtx is a context of 15s carrying secret as the bearer token.
func tokenCtx(t *testing.T, secret string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
}

// Through real brokers: the bootstrap token is stored once and works; an
// admin makes a role and a token; the token publishes and consumes where
// its role allows and nowhere else; its receipts are signed, forged ones
// refused with the copy untouched, rotation keeps old receipts valid
// until the next; a revoked token is refused and its stream ended.
func TestAuthThroughTheCluster(t *testing.T) {
	c := New(t, Config{Brokers: 3, Shards: 2})
	reg, conn := authProxy(t, c)
	authc := sundialv1.NewAuthClient(conn)
	adminCtx := func() context.Context { return tokenCtx(t, bootstrapSecret) }

	Eventually(t, 30*time.Second, func() error {
		_, err := authc.ListTokens(adminCtx(), &sundialv1.ListTokensRequest{})
		return err
	})
	if _, err := authc.ListTokens(context.Background(), &sundialv1.ListTokensRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListTokens without a token = %v, want Unauthenticated", err)
	}

	if _, err := authc.CreateRole(adminCtx(), &sundialv1.CreateRoleRequest{Name: "demo", Grants: []*sundialv1.Grant{{Permission: "publish", Pattern: "authq*"}, {Permission: "consume", Pattern: "authq*"}}}); err != nil {
		t.Fatalf("CreateRole = %v", err)
	}
	created, err := authc.CreateToken(adminCtx(), &sundialv1.CreateTokenRequest{Name: "demo", Role: "demo"})
	if err != nil {
		t.Fatalf("CreateToken = %v", err)
	}
	demo := created.GetSecret()
	if len(demo) != 43 {
		t.Fatalf("secret %q: want 43 base64url characters (32 bytes)", demo)
	}
	if _, err := sundialv1.NewAdminClient(conn).CreateTopic(adminCtx(), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "authq"}}); err != nil {
		t.Fatalf("CreateTopic = %v", err)
	}

	prod := sundialv1.NewProducerClient(conn)
	pub := func(secret, topic string, n int) error {
		var msgs []*sundialv1.Message
		for i := range n {
			msgs = append(msgs, &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})
		}
		_, err := prod.Publish(tokenCtx(t, secret), &sundialv1.PublishRequest{Messages: msgs})
		return err
	}
	Eventually(t, 20*time.Second, func() error { return pub(demo, "authq", 3) }) // the proxy learns the new token
	if err := pub(demo, "other", 1); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Publish on another topic = %v, want PermissionDenied", err)
	}

	cons := sundialv1.NewConsumerClient(conn)
	var receipts []string
	Eventually(t, 20*time.Second, func() error {
		resp, err := cons.Receive(tokenCtx(t, demo), &sundialv1.ReceiveRequest{Topic: "authq", MaxMessages: 3, WaitMs: 1000})
		if err != nil {
			return err
		}
		for _, d := range resp.GetDeliveries() {
			receipts = append(receipts, d.GetReceipt())
		}
		if len(receipts) < 3 {
			return fmt.Errorf("%d deliveries, want 3", len(receipts))
		}
		return nil
	})
	for _, r := range receipts {
		if _, err := receipt.Parse(r); err == nil {
			t.Fatalf("receipt %q handed out plain, want it signed", r)
		}
	}
	alt := []byte(receipts[0])
	alt[10] ^= 1
	if _, err := cons.Ack(tokenCtx(t, demo), &sundialv1.AckRequest{Receipts: []string{string(alt)}}); status.Code(err) != codes.InvalidArgument || apierr.Violations(err)[0].Field != "receipts[0]" {
		t.Fatalf("Ack(altered receipt) = %v, want InvalidArgument on receipts[0]", err)
	}

	// One rotation: the receipt of the old key still acks (so the forged
	// ack above changed nothing).
	if _, err := authc.RotateReceiptKey(adminCtx(), &sundialv1.RotateReceiptKeyRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, err := cons.Ack(tokenCtx(t, demo), &sundialv1.AckRequest{Receipts: []string{receipts[0]}})
	if err != nil || resp.GetResults()[0].GetError() != nil || resp.GetResults()[0].GetReceipt() != receipts[0] {
		t.Fatalf("Ack(receipt of the previous key) = %v, %v; want success naming it", resp, err)
	}
	// A second rotation drops the key receipts[1] was signed with.
	if _, err := authc.RotateReceiptKey(adminCtx(), &sundialv1.RotateReceiptKeyRequest{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 20*time.Second, func() error {
		_, err := cons.Ack(tokenCtx(t, demo), &sundialv1.AckRequest{Receipts: []string{receipts[1]}})
		if status.Code(err) != codes.InvalidArgument {
			return fmt.Errorf("Ack(receipt of a dropped key) = %w, want InvalidArgument", err)
		}
		return nil
	})

	// Revocation ends an open stream and refuses new calls.
	sctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+demo), 60*time.Second)
	defer cancel()
	st, err := cons.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "authq", MaxInFlight: 10}}}); err != nil {
		t.Fatal(err)
	}
	if err := pub(demo, "authq", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the stream is open and delivering
		t.Fatalf("Recv() = %v, want a delivery", err)
	}
	if _, err := authc.RevokeToken(adminCtx(), &sundialv1.RevokeTokenRequest{Name: "demo"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("stream after revocation ended with %v, want Unauthenticated", err)
		}
		break
	}
	if err := pub(demo, "authq", 1); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Publish with a revoked token = %v, want Unauthenticated", err)
	}
	// Audited: the failures to authenticate, the denial, the token changes.
	for _, e := range []struct{ action, outcome string }{
		{"authenticate", "unauthenticated"},
		{"/sundial.v1.Auth/CreateToken", "ok"},
		{"/sundial.v1.Auth/RevokeToken", "ok"},
		{"/sundial.v1.Auth/RotateReceiptKey", "ok"},
	} {
		if n := auditCount(t, reg, e.action, e.outcome); n < 1 {
			t.Errorf("sundial_proxy_audit_events_total{action=%q,outcome=%q} = %v, want at least 1", e.action, e.outcome, n)
		}
	}
}

// Bad inputs to the Auth RPCs are refused with the field named and change
// nothing.
func TestAuthBadInputs(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	_, conn := authProxy(t, c)
	authc := sundialv1.NewAuthClient(conn)
	ctx := func() context.Context { return tokenCtx(t, bootstrapSecret) }
	Eventually(t, 30*time.Second, func() error {
		_, err := authc.ListTokens(ctx(), &sundialv1.ListTokensRequest{})
		return err
	})
	if _, err := authc.CreateRole(ctx(), &sundialv1.CreateRoleRequest{Name: "r", Grants: []*sundialv1.Grant{{Permission: "consume", Pattern: "x*"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := authc.CreateToken(ctx(), &sundialv1.CreateTokenRequest{Name: "uses-r", Role: "r"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"token name with a space", func() error {
			_, err := authc.CreateToken(ctx(), &sundialv1.CreateTokenRequest{Name: "a b", Role: "admin"})
			return err
		}, codes.InvalidArgument, "name"},
		{"token of an unknown role", func() error {
			_, err := authc.CreateToken(ctx(), &sundialv1.CreateTokenRequest{Name: "x", Role: "nope"})
			return err
		}, codes.InvalidArgument, "role"},
		{"negative expiry", func() error {
			_, err := authc.CreateToken(ctx(), &sundialv1.CreateTokenRequest{Name: "x", Role: "admin", ExpiresInSeconds: -1})
			return err
		}, codes.InvalidArgument, "expires_in_seconds"},
		{"token name taken", func() error {
			_, err := authc.CreateToken(ctx(), &sundialv1.CreateTokenRequest{Name: "bootstrap", Role: "admin"})
			return err
		}, codes.AlreadyExists, ""},
		{"revoke unknown", func() error {
			_, err := authc.RevokeToken(ctx(), &sundialv1.RevokeTokenRequest{Name: "ghost"})
			return err
		}, codes.NotFound, ""},
		{"role with an unknown permission", func() error {
			_, err := authc.CreateRole(ctx(), &sundialv1.CreateRoleRequest{Name: "bad", Grants: []*sundialv1.Grant{{Permission: "write", Pattern: "*"}}})
			return err
		}, codes.InvalidArgument, "grants[0]"},
		{"admin on a pattern", func() error {
			_, err := authc.CreateRole(ctx(), &sundialv1.CreateRoleRequest{Name: "bad", Grants: []*sundialv1.Grant{{Permission: "admin", Pattern: "x*"}}})
			return err
		}, codes.InvalidArgument, "grants[0]"},
		{"role without grants", func() error {
			_, err := authc.CreateRole(ctx(), &sundialv1.CreateRoleRequest{Name: "bad"})
			return err
		}, codes.InvalidArgument, "grants"},
		{"role admin exists", func() error {
			_, err := authc.CreateRole(ctx(), &sundialv1.CreateRoleRequest{Name: "admin", Grants: []*sundialv1.Grant{{Permission: "consume", Pattern: "*"}}})
			return err
		}, codes.AlreadyExists, ""},
		{"delete a role in use", func() error {
			_, err := authc.DeleteRole(ctx(), &sundialv1.DeleteRoleRequest{Name: "r"})
			return err
		}, codes.FailedPrecondition, "name"},
		{"delete admin", func() error {
			_, err := authc.DeleteRole(ctx(), &sundialv1.DeleteRoleRequest{Name: "admin"})
			return err
		}, codes.InvalidArgument, "name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if tc.field != "" {
				vs := apierr.Violations(err)
				if len(vs) == 0 || vs[0].Field != tc.field {
					t.Fatalf("violations = %v, want field %s", vs, tc.field)
				}
			}
		})
	}
	toks, err := authc.ListTokens(ctx(), &sundialv1.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range toks.GetTokens() {
		names = append(names, tk.GetName())
	}
	if strings.Join(names, ",") != "bootstrap,uses-r" {
		t.Fatalf("tokens after the refusals = %v, want bootstrap, uses-r", names)
	}
	roles, err := authc.ListRoles(ctx(), &sundialv1.ListRolesRequest{})
	if err != nil || len(roles.GetRoles()) != 2 || !roles.GetRoles()[0].GetBuiltin() {
		t.Fatalf("ListRoles = %v, %v; want admin (built in) and r", roles, err)
	}
}
