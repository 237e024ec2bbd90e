package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proxy/internal/auth"
)

// fakeAuth serves AuthSync from a state the test sets, as a broker serves
// its meta group's.
type fakeAuth struct {
	brokerv1.UnimplementedAuthSyncServer
	mu      sync.Mutex
	st      *brokerv1.AuthState
	changed chan struct{}
}

func newFakeAuth() *fakeAuth {
	return &fakeAuth{st: &brokerv1.AuthState{}, changed: make(chan struct{})}
}

// set changes the state (revision bumped) and wakes the watch streams.
func (f *fakeAuth) set(mod func(*brokerv1.AuthState)) {
	f.mu.Lock()
	mod(f.st)
	f.st.Revision++
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeAuth) WatchAuth(_ *brokerv1.WatchAuthRequest, st grpc.ServerStreamingServer[brokerv1.AuthState]) error {
	for {
		f.mu.Lock()
		cur, ch := f.st, f.changed
		msg := &brokerv1.AuthState{Revision: cur.Revision, Tokens: cur.Tokens, Roles: cur.Roles, ReceiptKeys: cur.ReceiptKeys}
		f.mu.Unlock()
		if err := st.Send(msg); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		case <-st.Context().Done():
			return nil
		}
	}
}

func tokenOf(name, secret, role string, expires time.Time) *brokerv1.AuthToken {
	sum := sha256.Sum256([]byte(secret))
	t := &brokerv1.AuthToken{Name: name, Sha256: sum[:], Role: role}
	if !expires.IsZero() {
		t.ExpiresAtMs = expires.UnixMilli()
	}
	return t
}

const (
	adminSecret = "admin-secret-0123456789abcdef0123456789"
	demoSecret  = "demo-secret-0123456789abcdef0123456789ab"
)

// startAuthCluster is startCluster with authentication on, an admin token,
// a demo token (publish and consume on "w*", inspect on "wide") and one
// receipt key; it waits until the proxy knows them.
func startAuthCluster(t *testing.T) (*Server, *fakeBroker, *grpc.ClientConn) {
	t.Helper()
	srv, leader, conn := startClusterWith(t, nil, func(c *Config) { c.Auth.Enabled = true })
	leader.auth.set(func(st *brokerv1.AuthState) {
		st.Tokens = []*brokerv1.AuthToken{tokenOf("root", adminSecret, "admin", time.Time{}), tokenOf("demo", demoSecret, "demo", time.Time{})}
		st.Roles = []*brokerv1.AuthRole{{Name: "demo", Grants: []*brokerv1.AuthGrant{{Permission: "publish", Pattern: "w*"}, {Permission: "consume", Pattern: "w*"}, {Permission: "inspect", Pattern: "wide"}}}}
		st.ReceiptKeys = []*brokerv1.AuthReceiptKey{{Id: 1, Secret: bytes.Repeat([]byte{1}, 32)}}
	})
	waitFor(t, "the proxy learns the tokens", func() bool {
		_, err := sundialv1.NewAdminClient(conn).ListTopics(bearer(t.Context(), adminSecret), &sundialv1.ListTopicsRequest{})
		return status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.Unavailable
	})
	return srv, leader, conn
}

func bearer(ctx context.Context, secret string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
}

func publish(ctx context.Context, conn *grpc.ClientConn, topic string) error {
	_, err := sundialv1.NewProducerClient(conn).Publish(ctx, &sundialv1.PublishRequest{RequestId: "r-" + topic, Messages: []*sundialv1.Message{{Topic: topic, Payload: []byte("x")}}})
	return err
}

// Every method the proxy's gRPC server serves has a rule: a method added
// without one fails here (and is refused PermissionDenied at run time).
func TestEveryMethodHasARule(t *testing.T) {
	srv, _, _ := startCluster(t)
	for name, info := range srv.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			full := "/" + name + "/" + m.Name
			if _, ok := auth.Rules[full]; !ok {
				t.Errorf("method %s has no rule in auth.Rules", full)
			}
		}
	}
	// And every rule names a method of a service descriptor.
	for full := range auth.Rules {
		svc, method, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
		if err != nil {
			t.Errorf("rule %s: no service %s", full, svc)
			continue
		}
		if d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method)) == nil {
			t.Errorf("rule %s: no method %s in %s", full, method, svc)
		}
	}
}

func TestAuthenticationCodes(t *testing.T) {
	_, _, conn := startAuthCluster(t)
	cases := []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"no credential", t.Context(), codes.Unauthenticated},
		{"unknown token", bearer(t.Context(), "nope-nope-nope-nope-nope-nope-nope-nope"), codes.Unauthenticated},
		{"not a bearer", metadata.AppendToOutgoingContext(t.Context(), "authorization", "Basic eDp5"), codes.Unauthenticated},
		{"demo token", bearer(t.Context(), demoSecret), codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := publish(tc.ctx, conn, "wide"); status.Code(err) != tc.want {
				t.Fatalf("Publish = %v, want %v", err, tc.want)
			}
		})
	}
}

// Each permission on a pattern, both ways; a refusal names the permission
// and the topic asked for, never others.
func TestPermissionsOnPatterns(t *testing.T) {
	_, _, conn := startAuthCluster(t)
	demo, root := bearer(t.Context(), demoSecret), bearer(t.Context(), adminSecret)
	adm := sundialv1.NewAdminClient(conn)
	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"publish on w* topic", func() error { return publish(demo, conn, "wide") }, codes.OK},
		{"publish outside w*", func() error { return publish(demo, conn, "orders") }, codes.PermissionDenied},
		{"publish to w* naming another topic in a message", func() error {
			_, err := sundialv1.NewProducerClient(conn).Publish(demo, &sundialv1.PublishRequest{Topic: "wide", Messages: []*sundialv1.Message{{Topic: "orders", Payload: []byte("x")}}})
			return err
		}, codes.PermissionDenied},
		{"inspect on the exact topic", func() error {
			_, err := adm.ListMessages(demo, &sundialv1.ListMessagesRequest{Topic: "wide"})
			return err
		}, codes.OK},
		{"inspect on another w* topic", func() error {
			_, err := adm.ListMessages(demo, &sundialv1.ListMessagesRequest{Topic: "wider"})
			return err
		}, codes.PermissionDenied},
		{"manage without the permission", func() error {
			_, err := adm.DeleteTopic(demo, &sundialv1.DeleteTopicRequest{Name: "wide"})
			return err
		}, codes.PermissionDenied},
		{"manage as admin", func() error {
			_, err := adm.DeleteTopic(root, &sundialv1.DeleteTopicRequest{Name: "wide"})
			return err
		}, codes.OK},
		{"admin without the permission", func() error {
			_, err := sundialv1.NewAuthClient(conn).ListTokens(demo, &sundialv1.ListTokensRequest{})
			return err
		}, codes.PermissionDenied},
		{"admin cluster call without the permission", func() error {
			_, err := sundialv1.NewClusterClient(conn).ListShards(demo, &sundialv1.ListShardsRequest{})
			return err
		}, codes.PermissionDenied},
		{"backup call without the admin permission", func() error {
			_, err := sundialv1.NewBackupsClient(conn).ListBackupRuns(demo, &sundialv1.ListBackupRunsRequest{})
			return err
		}, codes.PermissionDenied},
		{"backup call as admin", func() error {
			_, err := sundialv1.NewBackupsClient(conn).ListBackupRuns(root, &sundialv1.ListBackupRunsRequest{})
			return err
		}, codes.OK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	err := publish(demo, conn, "orders")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "publish") || !strings.Contains(msg, `"orders"`) || strings.Contains(msg, "wide") {
		t.Errorf("PermissionDenied message = %q, want the permission and the topic asked for only", msg)
	}
}

func TestHTTPAuthCodes(t *testing.T) {
	srv, _, _ := startAuthCluster(t)
	url := "http://" + srv.HTTPAddr() + "/v1/topics/wide/messages"
	post := func(topicURL, secret string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, topicURL, strings.NewReader(`{"messages":[{"payload":"eA=="}]}`))
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(url, ""); got != http.StatusUnauthorized {
		t.Errorf("POST without a token = %d, want 401", got)
	}
	if got := post(url, "bad-bad-bad-bad-bad-bad-bad-bad-bad"); got != http.StatusUnauthorized {
		t.Errorf("POST with a bad token = %d, want 401", got)
	}
	if got := post("http://"+srv.HTTPAddr()+"/v1/topics/orders/messages", demoSecret); got != http.StatusForbidden {
		t.Errorf("POST outside the role = %d, want 403", got)
	}
	if got := post(url, demoSecret); got != http.StatusOK {
		t.Errorf("POST within the role = %d, want 200", got)
	}
	// The restore stream's route (httpapi/stream.go) carries the token too.
	restore := func(secret string) int {
		header := map[string]string{}
		if secret != "" {
			header["Authorization"] = "Bearer " + secret
		}
		code, _ := do(t, srv, http.MethodPost, "/v1/backups/:restore", "application/json", `{"src":"file:///backups"}`, header)
		return code
	}
	if got := restore(""); got != http.StatusUnauthorized {
		t.Errorf("POST :restore without a token = %d, want 401", got)
	}
	if got := restore(demoSecret); got != http.StatusForbidden {
		t.Errorf("POST :restore without the admin permission = %d, want 403", got)
	}
	if got := restore(adminSecret); got != http.StatusOK {
		t.Errorf("POST :restore as admin = %d, want 200", got)
	}
	// A receipt not signed by the cluster: 400, before any broker call.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+srv.HTTPAddr()+"/v1/acks", strings.NewReader(`{"receipts":["AQAAAGQAAAAAAAAAAQAAAAABZA"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+demoSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /v1/acks with a forged receipt = %d, want 400", resp.StatusCode)
	}
}

// subscribeWide opens a Subscribe stream on topic wide and reads n deliveries.
func subscribeWide(ctx context.Context, t *testing.T, conn *grpc.ClientConn, n int) (sundialv1.Consumer_SubscribeClient, []string) {
	t.Helper()
	st, err := sundialv1.NewConsumerClient(conn).Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: "wide", MaxInFlight: int32(n)}}}); err != nil {
		t.Fatal(err)
	}
	var receipts []string
	for len(receipts) < n {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("Recv() after %d deliveries = %v", len(receipts), err)
		}
		receipts = append(receipts, resp.GetDelivery().GetReceipt())
	}
	return st, receipts
}

// A revoked token is refused, and the Subscribe stream it opened ends
// with Unauthenticated.
func TestRevokedTokenEndsItsStream(t *testing.T) {
	_, leader, conn := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(bearer(t.Context(), demoSecret), 30*time.Second)
	defer cancel()
	st, _ := subscribeWide(ctx, t, conn, 2)
	leader.auth.set(func(s *brokerv1.AuthState) { s.Tokens = s.Tokens[:1] }) // demo revoked
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("stream ended with %v, want Unauthenticated", err)
		}
		break
	}
	if err := publish(bearer(t.Context(), demoSecret), conn, "wide"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Publish with the revoked token = %v, want Unauthenticated", err)
	}
}

// A token past its expiry is refused and its stream ends.
func TestExpiredTokenEndsItsStream(t *testing.T) {
	_, leader, conn := startAuthCluster(t)
	const secret = "short-lived-0123456789abcdef0123456789"
	leader.auth.set(func(s *brokerv1.AuthState) {
		s.Tokens = append(s.Tokens, tokenOf("short", secret, "demo", time.Now().Add(2*time.Second)))
	})
	ctx, cancel := context.WithTimeout(bearer(t.Context(), secret), 30*time.Second)
	defer cancel()
	var st sundialv1.Consumer_SubscribeClient
	waitFor(t, "the proxy learns the short-lived token", func() bool {
		return publish(bearer(t.Context(), secret), conn, "wide") == nil
	})
	st, _ = subscribeWide(ctx, t, conn, 1)
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("stream ended with %v, want Unauthenticated (expired)", err)
		}
		break
	}
	if err := publish(bearer(t.Context(), secret), conn, "wide"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Publish with the expired token = %v, want Unauthenticated", err)
	}
}

// Receipts handed out are signed; an altered or forged one is refused
// InvalidArgument and nothing reaches the broker; a rotation keeps the
// old key's receipts valid until the next rotation drops it.
func TestSignedReceipts(t *testing.T) {
	_, leader, conn := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(bearer(t.Context(), demoSecret), 30*time.Second)
	defer cancel()
	st, receipts := subscribeWide(ctx, t, conn, 3)
	_ = st
	cons := sundialv1.NewConsumerClient(conn)
	acked := func() int {
		leader.mu.Lock()
		defer leader.mu.Unlock()
		return len(leader.acked)
	}

	alt := []byte(receipts[0])
	alt[len(alt)/2] ^= 1
	forged := []string{string(alt), "AQAAAGQAAAAAAAAAAQAAAAABZA"} // altered; a plain receipt built by hand
	for _, r := range forged {
		_, err := cons.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{receipts[1], r}})
		if status.Code(err) != codes.InvalidArgument || len(apierr.Violations(err)) != 1 || apierr.Violations(err)[0].Field != "receipts[1]" {
			t.Fatalf("Ack(forged %q) = %v, want InvalidArgument on receipts[1]", r, err)
		}
	}
	if n := acked(); n != 0 {
		t.Fatalf("broker saw %d acks after forged receipts, want 0 (the good one in the call too)", n)
	}

	// Rotate: key 2 signs, key 1 still verifies.
	leader.auth.set(func(s *brokerv1.AuthState) {
		s.ReceiptKeys = append([]*brokerv1.AuthReceiptKey{{Id: 2, Secret: bytes.Repeat([]byte{2}, 32)}}, s.ReceiptKeys...)
	})
	key2 := func(id uint32) []byte {
		if id == 2 {
			return bytes.Repeat([]byte{2}, 32)
		}
		return nil
	}
	waitFor(t, "the proxy signs with the new key", func() bool {
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		_, fresh := subscribeWide(sctx, t, conn, 1)
		_, _, err := receipt.Verify(fresh[0], key2)
		return err == nil
	})
	resp, err := cons.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{receipts[0]}})
	if err != nil || resp.GetResults()[0].GetReceipt() != receipts[0] || resp.GetResults()[0].GetError() != nil {
		t.Fatalf("Ack(receipt of the old key) after one rotation = %v, %v; want success naming the receipt sent", resp, err)
	}
	// Rotate again: key 1 is dropped.
	leader.auth.set(func(s *brokerv1.AuthState) {
		s.ReceiptKeys = []*brokerv1.AuthReceiptKey{{Id: 3, Secret: bytes.Repeat([]byte{3}, 32)}, s.ReceiptKeys[0]}
	})
	// Wait for the proxy to sign with key 3 (it takes the keys as one
	// state), without acking anything meanwhile: an ack polled before the
	// rotation arrived would still succeed and reach the broker.
	key3 := func(id uint32) []byte {
		if id == 3 {
			return bytes.Repeat([]byte{3}, 32)
		}
		return nil
	}
	waitFor(t, "the second rotation reaches the proxy", func() bool {
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		_, fresh := subscribeWide(sctx, t, conn, 1)
		_, _, err := receipt.Verify(fresh[0], key3)
		return err == nil
	})
	if _, err := cons.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{receipts[1]}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Ack(receipt of the dropped key) = %v, want InvalidArgument", err)
	}
	if n := acked(); n != 1 {
		t.Fatalf("broker saw %d acks, want 1", n)
	}
}

// The admin UI calls the proxy as the token its request carries: without
// one it asks for a token, with the admin token it lists the topics.
func TestUIUsesTheRequestsToken(t *testing.T) {
	srv, _, _ := startAuthCluster(t)
	get := func(secret string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+srv.HTTPAddr()+"/ui/", nil)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	_, without := get("")
	_, with := get(adminSecret)
	if !strings.Contains(without, `name="token"`) {
		t.Errorf("UI without a token does not ask for one:\n%.600s", without)
	}
	if !strings.Contains(with, "/ui/topics/wide") || strings.Contains(with, `name="token"`) {
		t.Errorf("UI with the admin token does not list the topics:\n%.600s", with)
	}
}
