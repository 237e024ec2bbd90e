package store

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// fakeS3 is a real S3 protocol server (gofakes3 over memory) on loopback
// that accepts only requests signed with one access key id.
type fakeS3 struct {
	// endpoint is host:port of the server.
	endpoint string
	backend  *s3mem.Backend

	mu sync.Mutex
	// tokens are the session tokens requests carried, in order (guarded
	// by mu).
	tokens []string
}

// newFakeS3 starts a server with the given buckets, accepting requests
// signed by keyID; it stops when the test ends.
func newFakeS3(t *testing.T, keyID string, buckets ...string) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			t.Fatalf("CreateBucket(%q) = %v", b, err)
		}
	}
	f := &fakeS3{backend: backend}
	s3 := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := accessKeyID(r.Header.Get("Authorization")); got != keyID {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			if _, err := w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>` +
				`<Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>`)); err != nil {
				t.Logf("fake S3: writing the 403 body: %v", err)
			}
			return
		}
		f.mu.Lock()
		f.tokens = append(f.tokens, r.Header.Get("X-Amz-Security-Token"))
		f.mu.Unlock()
		s3.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.endpoint = strings.TrimPrefix(srv.URL, "http://")
	return f
}

// url answers the s3:// URL of bucket/prefix on this server.
func (f *fakeS3) url(bucket, prefix string) string {
	u := "s3://" + bucket
	if prefix != "" {
		u += "/" + prefix
	}
	return u + "?endpoint=" + f.endpoint + "&region=us-east-1&tls=false"
}

func (f *fakeS3) sessionTokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

// accessKeyID reads the key id of an AWS signature v4 Authorization
// header: "AWS4-HMAC-SHA256 Credential=<id>/<date>/<region>/s3/aws4_request, ...".
func accessKeyID(auth string) string {
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(cred, "/")
	return id
}

// env answers a Getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
