package healthcheck

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestProbe(t *testing.T) {
	var unready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if unready.Load() {
			http.Error(w, "not ready: shard 3 has no known leader", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := Probe(srv.URL + "/readyz"); err != nil {
		t.Fatalf("Probe(ready) = %v, want nil", err)
	}
	unready.Store(true)
	if err := Probe(srv.URL + "/readyz"); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "shard 3") {
		t.Fatalf("Probe(not ready) = %v, want an error with the code and the reason", err)
	}
	srv.Close()
	if err := Probe(srv.URL + "/readyz"); err == nil {
		t.Fatalf("Probe(closed server) = nil, want an error")
	}
}
