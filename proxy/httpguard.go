package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sundialmq/sundial/proxy/internal/httpapi"
)

// httpGuard refuses, before any handler runs, the HTTP requests a browser
// can be tricked into sending (docs/security.md, "Limits" and "CSRF"):
//   - a Host header not among the allowed names (DNS rebinding): 421 on
//     the API, the UI and /docs;
//   - on the API (/v1/), a request a browser marks cross-site
//     (Sec-Fetch-Site: cross-site) or whose Origin is neither the proxy
//     itself nor an allowed origin: 403;
//   - on the API, a POST, PUT, PATCH or DELETE with a body or a
//     Content-Type that is not application/json (form and text/plain
//     bodies are what a cross-site form can send without a preflight): 415.
//
// It also bounds the API's request bodies: a Content-Length over
// httpapi.MaxBodyBytes is answered 413 at once, and the body is read here,
// through http.MaxBytesReader and within the server's read timeout, into a
// buffer that grows with the bytes that actually arrive. The transcoder
// gets it whole: it sizes its buffer from Content-Length, which a client
// sending one byte a second would otherwise make it allocate up front.
type httpGuard struct {
	hosts   []string // allowed Host names, lower case, without port; "*" allows any
	origins []string // allowed Origins (scheme://host[:port]), lower case
	refused refusals
}

func newHTTPGuard(cfg Config, refused refusals) *httpGuard {
	g := &httpGuard{refused: refused}
	for _, h := range cfg.AllowedHosts {
		g.hosts = append(g.hosts, strings.ToLower(h))
	}
	if len(g.hosts) == 0 {
		g.hosts = defaultHosts(cfg.HTTPAddr)
	}
	for _, o := range cfg.AllowedOrigins {
		g.origins = append(g.origins, strings.ToLower(strings.TrimSuffix(o, "/")))
	}
	return g
}

// defaultHosts are the names a proxy answers to with no allowed_hosts set:
// localhost, any loopback address (checked in hostAllowed), the host of
// its HTTP listen address and the machine's hostname.
func defaultHosts(httpAddr string) []string {
	out := []string{"localhost"}
	if h, _, err := net.SplitHostPort(httpAddr); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			out = append(out, strings.ToLower(h))
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		out = append(out, strings.ToLower(name))
	}
	return out
}

func (g *httpGuard) hostAllowed(hostport string) bool {
	host := strings.ToLower(hostport)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return slices.Contains(g.hosts, "*") || slices.Contains(g.hosts, host)
}

// host wraps a handler of the API, the UI or the docs with the Host check.
func (g *httpGuard) host(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.refused.inc("http", refusedHost)
			refuse(w, http.StatusMisdirectedRequest, 7, fmt.Sprintf("host %q is not served here (allowed_hosts)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite reports why r is a cross-site request to refuse ("" if it is not).
func (g *httpGuard) crossSite(r *http.Request) string {
	origin := strings.ToLower(r.Header.Get("Origin"))
	if origin != "" && slices.Contains(g.origins, origin) {
		return ""
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return "a cross-site request (Sec-Fetch-Site) from an origin not in allowed_origins"
	}
	if origin == "" {
		return "" // not sent by a browser, or same-origin GET
	}
	u, err := url.Parse(origin)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("origin %q is not this proxy nor in allowed_origins", origin)
	}
	return ""
}

// api wraps the HTTP/JSON API with the cross-site, Content-Type and body
// checks.
func (g *httpGuard) api(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := g.crossSite(r); why != "" {
			g.refused.inc("http", refusedCrossSite)
			refuse(w, http.StatusForbidden, 7, why)
			return
		}
		if needsJSON(r) {
			mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if mt != "application/json" {
				g.refused.inc("http", refusedContentType)
				refuse(w, http.StatusUnsupportedMediaType, 3, fmt.Sprintf("%s needs Content-Type application/json, got %q", r.Method, r.Header.Get("Content-Type")))
				return
			}
		}
		if r.ContentLength > httpapi.MaxBodyBytes {
			g.refused.inc("http", refusedBodySize)
			w.Header().Set("Connection", "close")
			refuse(w, http.StatusRequestEntityTooLarge, 8, fmt.Sprintf("request body must be at most %d bytes, Content-Length says %d", httpapi.MaxBodyBytes, r.ContentLength))
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, httpapi.MaxBodyBytes))
			if err != nil {
				g.refuseBody(w, err)
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		}
		next.ServeHTTP(w, r)
	})
}

// needsJSON reports whether r must declare a JSON body: a POST, PUT, PATCH
// or DELETE that has a body or names a Content-Type. (A write with neither,
// `curl -X POST .../v1/topics/t:purge`, has nothing to misread; a browser's
// cross-site one carries an Origin and is refused by crossSite.)
func needsJSON(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return r.ContentLength != 0 || r.Header.Get("Content-Type") != ""
	}
	return false
}

// refuseBody answers a request whose body could not be read: over the size
// limit (413), cut by the read deadline (408), or lost with its connection.
// The connection is closed after the answer.
func (g *httpGuard) refuseBody(w http.ResponseWriter, err error) {
	w.Header().Set("Connection", "close")
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		g.refused.inc("http", refusedBodySize)
		refuse(w, http.StatusRequestEntityTooLarge, 8, fmt.Sprintf("request body must be at most %d bytes", httpapi.MaxBodyBytes))
	case errors.As(err, &ne) && ne.Timeout():
		g.refused.inc("http", refusedBodyTimeout)
		refuse(w, http.StatusRequestTimeout, 4, "request body not received within the read timeout (http_read_timeout)")
	default:
		refuse(w, http.StatusBadRequest, 3, "request body unreadable: "+err.Error())
	}
}

// refuse answers a JSON google.rpc.Status, as the API's errors are.
func refuse(w http.ResponseWriter, httpCode, grpcCode int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = fmt.Fprintf(w, `{"code":%d,"message":%q,"details":[]}`, grpcCode, msg)
}
