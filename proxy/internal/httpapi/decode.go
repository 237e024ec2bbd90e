package httpapi

import (
	"bytes"
	"net/http"
	"strconv"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

// undecodable turns the transcoder's Unknown answers into 400
// InvalidArgument. The proxy's gRPC boundary never lets a handler answer
// Unknown (it becomes Internal), so on the HTTP path an Unknown comes only
// from a request the transcoder could not decode into the RPC's request
// message: bad JSON, an unknown field, a value of the wrong type, an unknown
// query parameter. vanguard answers those 500 or 502 with code 2.
func undecodable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &errorRewriter{ResponseWriter: w}
		next.ServeHTTP(rw, r)
		rw.finish()
	})
}

// errorRewriter holds back a 500 or 502 answer until its body is complete,
// so finish can read the status in it. Other answers stream through.
type errorRewriter struct {
	http.ResponseWriter
	held *bytes.Buffer // the held-back body; nil while streaming through
	code int           // the held-back HTTP status
}

func (w *errorRewriter) WriteHeader(code int) {
	if code == http.StatusInternalServerError || code == http.StatusBadGateway {
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
	if protojson.Unmarshal(body, &st) == nil && codes.Code(st.GetCode()) == codes.Unknown {
		st.Code = int32(codes.InvalidArgument)
		st.Message = "request does not decode: " + st.GetMessage()
		if b, err := protojson.Marshal(&st); err == nil {
			body, code = b, http.StatusBadRequest
		}
	}
	h := w.Header()
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(code)
	_, _ = w.ResponseWriter.Write(body)
}
