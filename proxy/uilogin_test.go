package proxy

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// uiAnswer is what a UI call answered; the body is read and closed.
type uiAnswer struct {
	StatusCode int
	Header     http.Header
	cookies    []*http.Cookie
}

func (a uiAnswer) Cookies() []*http.Cookie { return a.cookies }

func uiCall(t *testing.T, method, u string, form url.Values, cookie *http.Cookie) (uiAnswer, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return uiAnswer{StatusCode: resp.StatusCode, Header: resp.Header, cookies: resp.Cookies()}, string(b)
}

func sessionOf(resp uiAnswer) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "sundial_session" {
			return c
		}
	}
	return nil
}

// With authentication on, the admin UI asks for a token first, keeps it in
// an HttpOnly SameSite=Strict cookie, shows only the topics the token's
// role reaches, and sends the browser back to sign in once the token is
// revoked.
func TestUILogin(t *testing.T) {
	srv, leader, _ := startAuthCluster(t)
	base := "http://" + srv.HTTPAddr()

	resp, _ := uiCall(t, http.MethodGet, base+"/ui/topics", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login?next=") {
		t.Fatalf("GET /ui/topics signed out = %d to %q, want 303 to the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := uiCall(t, http.MethodPost, base+"/ui/topics/wide/purge", url.Values{"confirm": {"wide"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Sign in") {
		t.Fatalf("POST signed out = %d, want 401 with the sign-in form", resp.StatusCode)
	}

	resp, body = uiCall(t, http.MethodPost, base+"/ui/login", url.Values{"token": {"not-a-token-not-a-token-not-a-token"}, "next": {"/ui/topics"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || sessionOf(resp) != nil || !strings.Contains(body, "not valid") {
		t.Fatalf("sign-in with a bad token = %d (cookie %v), want 401 and no session", resp.StatusCode, sessionOf(resp))
	}
	resp, _ = uiCall(t, http.MethodPost, base+"/ui/login", url.Values{"token": {demoSecret}, "next": {"//evil.example/"}}, nil)
	c := sessionOf(resp)
	if resp.StatusCode != http.StatusSeeOther || c == nil {
		t.Fatalf("sign-in with the demo token = %d, cookie %v; want 303 and a session", resp.StatusCode, c)
	}
	if loc := resp.Header.Get("Location"); loc != "/ui/topics" {
		t.Errorf("sign-in asked to go to //evil.example/ went to %q, want /ui/topics", loc)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || strings.Contains(c.Value, demoSecret) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path /ui/, the token encoded", c)
	}

	resp, body = uiCall(t, http.MethodGet, base+"/ui/topics", nil, c)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "/ui/topics/wide") || strings.Contains(body, "/ui/topics/orders") || !strings.Contains(body, "Sign out") {
		t.Fatalf("topics page signed in as demo = %d; want 200 listing wide only, with a sign-out button", resp.StatusCode)
	}

	// The calls of the cluster page's Backups forms carry the session's
	// token too: demo's role lacks admin, root's has it.
	calls := leader.backups.calls.Load()
	resp, body = uiCall(t, http.MethodPost, base+"/ui/cluster/backup-now", url.Values{"dest": {"file:///backups"}}, c)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "PermissionDenied") || leader.backups.calls.Load() != calls {
		t.Fatalf("Back up now signed in as demo = %d (%d Backups calls reached a broker), want 403 PermissionDenied and none: %s", resp.StatusCode, leader.backups.calls.Load()-calls, body)
	}
	resp, _ = uiCall(t, http.MethodPost, base+"/ui/login", url.Values{"token": {adminSecret}, "next": {"/ui/cluster"}}, nil)
	root := sessionOf(resp)
	if root == nil {
		t.Fatalf("sign-in as root = %d, no session", resp.StatusCode)
	}
	resp, body = uiCall(t, http.MethodPost, base+"/ui/cluster/backup-now", url.Values{"dest": {"file:///backups"}}, root)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, testBackupID) {
		t.Fatalf("Back up now signed in as root = %d to %q, want 303 naming the run started: %s", resp.StatusCode, loc, body)
	}

	leader.auth.set(func(st *brokerv1.AuthState) { st.Tokens = st.Tokens[:1] }) // demo revoked
	waitFor(t, "the revoked session is sent to sign in", func() bool {
		resp, _ := uiCall(t, http.MethodGet, base+"/ui/topics", nil, c)
		ended := sessionOf(resp)
		return resp.StatusCode == http.StatusUnauthorized && ended != nil && ended.MaxAge < 0
	})

	resp, _ = uiCall(t, http.MethodPost, base+"/ui/logout", url.Values{}, c)
	if ended := sessionOf(resp); resp.StatusCode != http.StatusSeeOther || ended == nil || ended.MaxAge >= 0 {
		t.Fatalf("sign-out = %d, cookie %v; want 303 and the session cleared", resp.StatusCode, ended)
	}
}
