package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func refusedCount(reg *prometheus.Registry, listener, reason string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sundial_proxy_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["listener"] == listener && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readCode reads one answer from c: its status code, 0 on an error.
func readCode(c net.Conn) int {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func heapAllocs() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// do sends one API request to the proxy's HTTP listener.
func do(t *testing.T, srv *Server, method, path, contentType, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+srv.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const publishBody = `{"messages":[{"topic":"wide","text":"x"}]}`

// Connections that declare a large body and send it a byte at a time are
// cut at the read deadline, and the proxy never allocates what their
// Content-Length announces; a fresh request is served afterwards.
func TestSlowBodiesAreCutAndNeverSizeABuffer(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, _, _ := startClusterWith(t, reg, func(c *Config) { c.ListenLimits.HTTPReadTimeout = 500 * time.Millisecond })
	const conns, declared = 20, 8_000_000
	before := heapAllocs()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", srv.HTTPAddr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			// A hang guard only: the proxy cuts the body long before.
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			fmt.Fprintf(c, "POST /v1/topics/wide/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", declared)
			br := bufio.NewReader(c)
			for {
				if _, err := c.Write([]byte(" ")); err != nil {
					errs <- fmt.Errorf("the connection closed without an answer: %w", err)
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if _, err := br.Peek(1); err == nil {
					break
				} else if !isTimeout(err) {
					errs <- fmt.Errorf("the connection closed without an answer: %w", err)
					return
				}
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang guard
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				errs <- fmt.Errorf("a slow body got no answer: %w", err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				errs <- fmt.Errorf("a slow body was answered %d, want 408", resp.StatusCode)
				return
			}
			// Closed after the answer: EOF, or a reset (unread bytes we sent).
			if _, err := io.Copy(io.Discard, br); err != nil {
				if isTimeout(err) {
					errs <- fmt.Errorf("the connection stayed open after the 408: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	grew := heapAllocs() - before
	if got := refusedCount(reg, "http", refusedBodyTimeout); got != conns {
		t.Errorf("refused{http, body_timeout} = %v, want %d", got, conns)
	}
	// Before the fix each connection made the transcoder allocate its
	// declared 8 MB: 160 MB here.
	if grew > conns*declared/4 {
		t.Errorf("the proxy allocated %d MB while %d connections declared %d MB bodies, want far less", grew>>20, conns, declared>>20)
	}
	if code, body := do(t, srv, "POST", "/v1/topics/wide/messages", "application/json", publishBody, nil); code != http.StatusOK {
		t.Fatalf("a fresh publish after the cut = %d %s, want 200", code, body)
	}
	// A Content-Length over the limit is refused before a byte is read.
	c, err := net.Dial("tcp", srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/topics/wide/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<30)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 1 GiB Content-Length = %d, want 413", resp.StatusCode)
	}
	if got := refusedCount(reg, "http", refusedBodySize); got != 1 {
		t.Errorf("refused{http, body_size} = %v, want 1", got)
	}
}

// A connection beyond MaxConnections is closed at once and counted; a slot
// freed is reused.
func TestConnectionsBeyondTheLimitAreClosed(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, _, _ := startClusterWith(t, reg, func(c *Config) { c.ListenLimits.MaxConnections = 2 })
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", srv.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		if code := readCode(c); code != http.StatusOK {
			t.Fatalf("GET /livez on a held connection = %d", code)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard
	fmt.Fprintf(extra, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if n, err := extra.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("a third connection read %d bytes, %v; want it closed", n, err)
	}
	_ = extra.Close()
	if got := refusedCount(reg, "http", refusedConnections); got != 1 {
		t.Errorf("refused{http, connections} = %v, want 1", got)
	}
	_ = held[0].Close()
	waitFor(t, "a freed connection slot", func() bool {
		c, err := net.Dial("tcp", srv.HTTPAddr())
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		return readCode(c) == http.StatusOK
	})
	_ = held[1].Close()
}

// Writes need a JSON body; cross-site requests and foreign Host names are
// refused; each is accepted when it is what a same-origin client sends.
func TestHTTPAPIIsNotACSRFTarget(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, _, _ := startClusterWith(t, reg, func(c *Config) { c.AllowedOrigins = []string{"https://console.example"} })
	const path = "/v1/topics/wide/messages"
	own := "http://" + srv.HTTPAddr()
	cases := []struct {
		name        string
		contentType string
		header      map[string]string
		want        int
		reason      string
	}{
		{"form body", "application/x-www-form-urlencoded", nil, http.StatusUnsupportedMediaType, refusedContentType},
		{"text/plain body", "text/plain", nil, http.StatusUnsupportedMediaType, refusedContentType},
		{"json body", "application/json; charset=utf-8", nil, http.StatusOK, ""},
		{"Sec-Fetch-Site cross-site", "application/json", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, refusedCrossSite},
		{"foreign Origin", "application/json", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, refusedCrossSite},
		{"same-origin Origin", "application/json", map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin"}, http.StatusOK, ""},
		{"allowed Origin", "application/json", map[string]string{"Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"}, http.StatusOK, ""},
		{"foreign Host", "application/json", map[string]string{"Host": "rebind.evil.example:7480"}, http.StatusMisdirectedRequest, refusedHost},
		{"localhost Host", "application/json", map[string]string{"Host": "localhost:7480"}, http.StatusOK, ""},
	}
	for _, tc := range cases {
		before := refusedCount(reg, "http", tc.reason)
		code, body := do(t, srv, "POST", path, tc.contentType, publishBody, tc.header)
		if code != tc.want {
			t.Errorf("%s: POST = %d %s, want %d", tc.name, code, body, tc.want)
		}
		if tc.reason != "" && refusedCount(reg, "http", tc.reason) != before+1 {
			t.Errorf("%s: refused{http, %s} not counted", tc.name, tc.reason)
		}
	}
	// The UI checks Host too (DNS rebinding reaches it as well).
	if code, _ := do(t, srv, "GET", "/ui/", "", "", map[string]string{"Host": "rebind.evil.example"}); code != http.StatusMisdirectedRequest {
		t.Errorf("GET /ui/ with a foreign Host = %d, want 421", code)
	}
	if code, _ := do(t, srv, "GET", "/ui/static/htmx.min.js", "", "", nil); code != http.StatusOK {
		t.Errorf("GET /ui/static/htmx.min.js = %d, want 200", code)
	}
}

// pprof answers on the admin listener only.
func TestDebugEndpointsAreOnTheAdminListenerOnly(t *testing.T) {
	srv, _, _ := startCluster(t)
	get := func(addr, path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", addr, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(srv.HTTPAddr(), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ on the HTTP port = %d, want 404", code)
	}
	if code := get(srv.AdminAddr(), "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ on the admin port = %d, want 200", code)
	}
	if code := get(srv.HTTPAddr(), "/metrics"); code != http.StatusOK {
		t.Errorf("GET /metrics on the HTTP port = %d, want 200 (metrics_addr unset)", code)
	}
}

// With metrics_addr set, /metrics moves off the HTTP port.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	srv, _, _ := startClusterWith(t, nil, func(c *Config) { c.MetricsAddr = "127.0.0.1:0" })
	for _, tc := range []struct {
		addr string
		want int
	}{{srv.MetricsAddr(), http.StatusOK}, {srv.HTTPAddr(), http.StatusNotFound}} {
		resp, err := http.Get("http://" + tc.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s/metrics = %d, want %d", tc.addr, resp.StatusCode, tc.want)
		}
	}
}
