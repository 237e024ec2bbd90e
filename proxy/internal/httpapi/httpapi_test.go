package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestDocsBundleEncodings(t *testing.T) {
	tests := []struct {
		name           string
		acceptEncoding string
		wantEncoding   string
	}{
		{"identity", "", ""},
		{"gzip", "gzip, deflate", "gzip"},
		{"gzip with q", "br;q=1.0, gzip;q=0.8", "gzip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/docs/swagger-ui-bundle.js", nil)
			if tc.acceptEncoding != "" {
				req.Header.Set("Accept-Encoding", tc.acceptEncoding)
			}
			rec := httptest.NewRecorder()
			serveDocs(rec, req)
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != tc.wantEncoding {
				t.Fatalf("GET bundle (Accept-Encoding %q) = %d, Content-Encoding %q; want 200, %q", tc.acceptEncoding, rec.Code, rec.Header().Get("Content-Encoding"), tc.wantEncoding)
			}
			body := rec.Body.Bytes()
			if tc.wantEncoding == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Contains(body, []byte("SwaggerUIBundle")) {
				t.Fatalf("bundle (%d bytes) does not define SwaggerUIBundle", len(body))
			}
		})
	}
}

func TestDocsPages(t *testing.T) {
	tests := []struct {
		path     string
		wantCode int
		want     string
	}{
		{"/docs", http.StatusOK, `id="swagger-ui"`},
		{"/docs/", http.StatusOK, `id="swagger-ui"`},
		{"/docs/init.js", http.StatusOK, `url: "/openapi.json"`},
		{"/docs/swagger-ui.css", http.StatusOK, ".swagger-ui"},
		{"/docs/LICENSE", http.StatusNotFound, ""},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		serveDocs(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.wantCode || !bytes.Contains(rec.Body.Bytes(), []byte(tc.want)) {
			t.Errorf("GET %s = %d, want %d holding %q", tc.path, rec.Code, tc.wantCode, tc.want)
		}
	}
}

func TestOpenAPIIsSwagger2(t *testing.T) {
	var doc struct {
		Swagger string         `json:"swagger"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil || doc.Swagger != "2.0" || len(doc.Paths) == 0 {
		t.Fatalf("embedded openapi.json: swagger %q, %d paths, %v; want a Swagger 2.0 document with paths", doc.Swagger, len(doc.Paths), err)
	}
}
