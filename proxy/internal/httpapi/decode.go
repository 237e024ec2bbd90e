package httpapi

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

// undecodable makes every error answer a JSON google.rpc.Status whose code
// is never Unknown:
//   - The proxy's gRPC boundary never lets a handler answer Unknown (it
//     becomes Internal), so on the HTTP path an Unknown comes only from a
//     request the transcoder could not decode into the RPC's request message:
//     bad JSON, an unknown field, a value of the wrong type, an unknown query
//     parameter. vanguard answers those 500 or 502 with code 2; they become
//     400 InvalidArgument.
//   - The transcoder's own plain-text refusals (405 method not allowed, 415
//     unsupported media type) get the Status body too (Unimplemented and
//     InvalidArgument).
func undecodable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &errorRewriter{ResponseWriter: w}
		next.ServeHTTP(rw, r)
		rw.finish()
	})
}

// errorRewriter holds back an error answer (HTTP status 400 or above) until
// its body is complete, so finish can read and rewrite it. Other answers
// stream through.
type errorRewriter struct {
	http.ResponseWriter
	held *bytes.Buffer // the held-back body; nil while streaming through
	code int           // the held-back HTTP status
}

func (w *errorRewriter) WriteHeader(code int) {
	if code >= http.StatusBadRequest {
		w.code, w.held = code, new(bytes.Buffer)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *errorRewriter) Write(b []byte) (int, error) {
	if w.held != nil {
		return w.held.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes an answer that is streaming through; a held one waits for
// finish.
func (w *errorRewriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.held == nil {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *errorRewriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *errorRewriter) finish() {
	if w.held == nil {
		return
	}
	body, code := w.held.Bytes(), w.code
	var st statuspb.Status
	switch {
	case protojson.Unmarshal(body, &st) == nil:
		if codes.Code(st.GetCode()) != codes.Unknown {
			break
		}
		st.Code = int32(codes.InvalidArgument)
		st.Message = "request does not decode: " + st.GetMessage()
		code = http.StatusBadRequest
		body = marshalStatus(&st)
	default: // a plain-text refusal of the transcoder
		st.Code = int32(codeOfHTTP(code))
		st.Message = strings.TrimSpace(string(body))
		body = marshalStatus(&st)
	}
	h := w.Header()
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(code)
	_, _ = w.ResponseWriter.Write(body)
}

func marshalStatus(st *statuspb.Status) []byte {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(st)
	if err != nil {
		return []byte(`{"code":13,"message":"cannot encode the error","details":[]}`)
	}
	return b
}

// codeOfHTTP names the gRPC code of an HTTP error status the transcoder
// answered by itself.
func codeOfHTTP(httpCode int) codes.Code {
	switch {
	case httpCode == http.StatusNotFound:
		return codes.NotFound
	case httpCode == http.StatusMethodNotAllowed || httpCode == http.StatusNotImplemented:
		return codes.Unimplemented
	case httpCode == http.StatusTooManyRequests || httpCode == http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case httpCode >= http.StatusInternalServerError:
		return codes.Internal
	default:
		return codes.InvalidArgument
	}
}

// jsonByDefault reads a request sent without a Content-Type (a GET, a
// bodiless write) as JSON: the API speaks JSON only. A body of another type
// never gets here: the proxy answers it 415 first (docs/security.md).
func jsonByDefault(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", "application/json")
		}
		next.ServeHTTP(w, r)
	})
}
