// Package ui tests the proxy's admin UI at /ui/ on a real in-process
// cluster: over HTTP (handler_test.go) and in headless Chromium driven by
// chromedp (browser_test.go).
package ui

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/integration"
)

// fixture is a one-broker cluster with a proxy whose /ui/ is under test,
// holding topic with scheduled messages.
type fixture struct {
	c    *integration.Cluster
	base string // http://127.0.0.1:port
	http *http.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c := integration.New(t, integration.Config{Brokers: 1, Shards: 2})
	return &fixture{
		c:    c,
		base: "http://" + c.Proxy.HTTPAddr(),
		// Redirects are checked, not followed.
		http: &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

func ctxT(t *testing.T) context.Context { return rpcCtx(t.Context(), t) }

// rpcCtx bounds one gRPC call of a test.
func rpcCtx(ctx context.Context, t *testing.T) context.Context {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	t.Cleanup(cancel)
	return rctx
}

// createTopic creates topic through gRPC with a second group "billing".
func (f *fixture) createTopic(ctx context.Context, t *testing.T, topic string) {
	t.Helper()
	if _, err := f.c.Admin.CreateTopic(rpcCtx(ctx, t), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: topic}}); err != nil {
		t.Fatalf("CreateTopic(%s) error = %v", topic, err)
	}
	if _, err := f.c.Admin.CreateGroup(rpcCtx(ctx, t), &sundialv1.CreateGroupRequest{Topic: topic, Group: "billing"}); err != nil {
		t.Fatalf("CreateGroup(%s, billing) error = %v", topic, err)
	}
}

// publish publishes payloads to topic due in delay, answering their ids.
func (f *fixture) publish(ctx context.Context, t *testing.T, topic string, delay time.Duration, payloads ...string) []string {
	t.Helper()
	req := &sundialv1.PublishRequest{RequestId: fmt.Sprintf("ui-test-%s-%d", topic, time.Now().UnixNano())}
	for i, p := range payloads {
		req.Messages = append(req.Messages, &sundialv1.Message{Topic: topic, Payload: []byte(p), DelayMs: delay.Milliseconds(), Headers: map[string]string{"n": fmt.Sprint(i)}})
	}
	resp, err := f.c.Producer.Publish(rpcCtx(ctx, t), req)
	if err != nil {
		t.Fatalf("Publish() error = %v", err)
	}
	var ids []string
	for i, r := range resp.GetResults() {
		if r.GetError() != nil {
			t.Fatalf("Publish() result %d error = %v", i, r.GetError())
		}
		ids = append(ids, r.GetMessageId())
	}
	return ids
}

// get fetches path, answering the status and body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := f.http.Get(f.base + path)
	if err != nil {
		t.Fatalf("GET %s error = %v", path, err)
	}
	return f.read(t, resp)
}

// answer is an HTTP answer to a POST, its body read and closed.
type answer struct {
	StatusCode int
	Header     http.Header
}

// post posts form to path as a page of the UI does (same origin); header
// holds extra name, value pairs.
func (f *fixture) post(t *testing.T, path string, form url.Values, header ...string) (answer, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.http.Do(req)
	if err != nil {
		t.Fatalf("POST %s error = %v", path, err)
	}
	code, body := f.read(t, resp)
	return answer{StatusCode: code, Header: resp.Header}, body
}

func (f *fixture) read(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b)
}
