// Package httpapi serves Sundial's public API (package sundial.v1) as HTTP/JSON on
// the proxy's HTTP port, generated from the one API contract:
//
//   - /v1/... routes come from the google.api.http annotations in
//     proto/sundial/v1/sundial.proto and backup.proto. connectrpc.com/vanguard
//     transcodes each request in-process into a call of the proxy's own
//     *grpc.Server, so an HTTP call runs the same handler, interceptors and
//     error boundary as a gRPC call.
//     Bodies are canonical protojson (bytes as base64); unknown fields are refused.
//     Streaming RPCs have no route, and stay gRPC-only, but for
//     Backups.RestoreBackup, whose progress frames are answered as
//     newline-delimited JSON (stream.go).
//   - Errors answer a JSON google.rpc.Status ({"code", "message", "details"}, the
//     details as protojson with "@type", e.g. google.rpc.BadRequest's field
//     violations) with the HTTP status of its gRPC code (docs/http-api.md lists
//     the mapping). Undecodable requests answer 400 InvalidArgument.
//   - GET /openapi.json is the OpenAPI (Swagger 2.0) document protoc-gen-openapiv2
//     generates from the same proto at `make gen` (openapi.json, checked current by
//     `make verify`); GET /docs is Swagger UI over it, vendored (swaggerui/).
//
// A Handler is immutable after New; its handlers run on net/http's goroutines and
// it starts none of its own.
package httpapi

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	"google.golang.org/grpc"
)

// OpenAPI is the generated OpenAPI document served at /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

//go:embed swaggerui
var swaggerUI embed.FS

// MaxBodyBytes caps a request body the transcoder buffers: the gRPC server
// takes messages of at most 4 MiB, which base64 and JSON inflate by about a
// third. The proxy refuses a larger body 413 before the transcoder sees it
// (proxy/httpguard.go); the transcoder's own limit is the same.
const MaxBodyBytes = 8 << 20

// Handler serves the HTTP/JSON API, /openapi.json and /docs.
type Handler struct {
	api http.Handler
}

// New builds the HTTP/JSON API over srv, whose services must all be registered
// already (the routes are read from their descriptors now).
func New(srv *grpc.Server) (*Handler, error) {
	tc, err := vanguardgrpc.NewTranscoder(srv,
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec {
			c := vanguard.NewJSONCodec(res)
			c.UnmarshalOptions.DiscardUnknown = false // a misspelt field is an error, not a silent default
			return c
		}),
		vanguard.WithDefaultServiceOptions(vanguard.WithMaxMessageBufferBytes(MaxBodyBytes)),
		vanguard.WithUnknownHandler(http.HandlerFunc(notFound)),
	)
	if err != nil {
		return nil, fmt.Errorf("httpapi: transcoder: %w", err)
	}
	return &Handler{api: restoreStream(tc, jsonByDefault(keyAlias(undecodable(tc))))}, nil
}

// Mount registers the API (/v1/), /openapi.json and /docs on mux.
func (h *Handler) Mount(mux *http.ServeMux) {
	mux.Handle("/v1/", h.api)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	mux.HandleFunc("GET /docs", serveDocs)
	mux.HandleFunc("GET /docs/", serveDocs)
}

// keyAlias lets `?key=K` name a message by key on the cancel and reschedule
// collection routes (DELETE /v1/topics/{topic}/messages and
// POST /v1/topics/{topic}/messages:reschedule), where the request field is
// message.key. Elsewhere a key parameter is passed on (and refused as unknown).
func keyAlias(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		onCollection := (r.Method == http.MethodDelete && strings.HasSuffix(p, "/messages")) ||
			(r.Method == http.MethodPost && strings.HasSuffix(p, "/messages:reschedule"))
		if q := r.URL.Query(); onCollection && q.Has("key") && !q.Has("message.key") {
			q["message.key"] = q["key"]
			q.Del("key")
			r = r.Clone(r.Context())
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}

// notFound answers a path no route matches, in the API's error shape.
func notFound(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = fmt.Fprintf(w, `{"code":5,"message":%q,"details":[]}`, "no route for "+r.Method+" "+r.URL.Path+" (see /docs)")
}

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(OpenAPI))
}

// bundle is swagger-ui-bundle.js, decompressed once on first use for clients
// that do not accept gzip.
var bundle = sync.OnceValues(func() ([]byte, error) {
	gz, err := swaggerUI.ReadFile("swaggerui/swagger-ui-bundle.js.gz")
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
})

func serveDocs(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/docs")
	name = strings.TrimPrefix(name, "/")
	switch name {
	case "", "index.html":
		serveFile(w, r, "index.html", "text/html; charset=utf-8")
	case "swagger-ui.css":
		serveFile(w, r, name, "text/css; charset=utf-8")
	case "init.js":
		serveFile(w, r, name, "text/javascript; charset=utf-8")
	case "swagger-ui-bundle.js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Add("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			gz, err := swaggerUI.ReadFile("swaggerui/swagger-ui-bundle.js.gz")
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz)
			return
		}
		js, err := bundle()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(js))
	default:
		http.NotFound(w, r)
	}
}

func serveFile(w http.ResponseWriter, r *http.Request, name, contentType string) {
	b, err := swaggerUI.ReadFile("swaggerui/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", contentType)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}
