package ui

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Options are the UI's settings.
type Options struct {
	// Login asks for a token before any page (the proxy's authentication
	// is on): a signed-in browser carries it in a session cookie, and
	// every call the UI makes for it carries the token, so the pages show
	// what its role allows and refuse the rest.
	Login bool
	// SecureCookie marks the session cookie Secure (the UI is served over
	// TLS), so a browser never sends it in plaintext.
	SecureCookie bool
}

// sessionCookie holds a signed-in browser's token (base64url, since a
// token read from a file may hold bytes a cookie cannot). HttpOnly keeps
// it from scripts, SameSite=Strict from every other site's requests.
const sessionCookie = "sundial_session"

// sessionTTL is how long a sign-in lasts in the browser.
const sessionTTL = 12 * time.Hour

// bearerOf is the Authorization value a request carries for the UI's
// calls: its own Authorization header (an API client, a proxy in front),
// else its session cookie's token; "" for neither.
func bearerOf(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		return h
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if tok, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil && len(tok) > 0 {
			return "Bearer " + string(tok)
		}
	}
	return ""
}

// withSession passes the request's credential on to the UI's calls of the
// proxy and, with Options.Login, sends a browser without one to sign in.
func (h *Handler) withSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/ui/static/") || r.URL.Path == "/ui/login" || r.URL.Path == "/ui/logout" {
			next.ServeHTTP(w, r)
			return
		}
		auth := bearerOf(r)
		if auth == "" && h.opts.Login {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/ui/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
				return
			}
			h.loginPage(w, r, http.StatusUnauthorized, "", "Sign in to act on the cluster.")
			return
		}
		if auth != "" {
			r = r.WithContext(metadata.AppendToOutgoingContext(r.Context(), "authorization", auth))
		}
		next.ServeHTTP(w, r)
	})
}

// loginView is the sign-in form.
type loginView struct{ Next string }

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request, code int, next, notice string) {
	if next == "" {
		next = r.URL.Query().Get("next")
	}
	p := &page{Title: "Sign in", Notice: notice, Data: &loginView{Next: safeNext(next)}}
	if code == http.StatusUnauthorized {
		p.Err = &apiError{HTTPStatus: code, Code: codes.Unauthenticated.String(), Message: notice}
		p.Notice = ""
	}
	h.render(w, r, code, "login", p)
}

// safeNext is where a sign-in may return to: a page of this UI, never
// another site (an open redirect).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") || next == "/ui/login" {
		return "/ui/topics"
	}
	return next
}

// login checks the token by listing topics with it, then keeps it in
// the session cookie.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" {
		p := &page{Title: "Sign in", Err: badInput("token", "paste a token's secret (shardctl auth token create prints it once)"), Data: &loginView{Next: next}}
		h.render(w, r, http.StatusBadRequest, "login", p)
		return
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(r.Context(), "authorization", "Bearer "+tok), callTimeout)
	defer cancel()
	if _, err := h.api.Admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{PageSize: 1}); err != nil {
		if status.Code(err) == codes.Unauthenticated {
			h.loginPage(w, r, http.StatusUnauthorized, next, "That token is not valid: unknown, revoked or expired.")
			return
		}
		p := &page{Title: "Sign in", Err: toAPIError(err), Data: &loginView{Next: next}}
		h.render(w, r, p.Err.HTTPStatus, "login", p)
		return
	}
	h.log.Info("ui sign-in", zap.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(tok)), Path: "/ui/",
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, Secure: h.opts.SecureCookie, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout forgets the session cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	h.endSession(w)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func (h *Handler) endSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, Secure: h.opts.SecureCookie, SameSite: http.SameSiteStrictMode})
}
