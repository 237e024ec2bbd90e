package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// restoreStream serves POST /v1/backups/{backup_id}:restore, the one
// server-streaming RPC with a route (Backups.RestoreBackup), which
// vanguard's REST transcoding does not take. The request is sent on as a
// Connect streaming call of the same method through the same transcoder
// (tc), so it runs the same handler, interceptors and principal as any
// call; each frame is answered as a line of newline-delimited JSON,
// {"result": RestoreProgress}, as grpc-gateway streams. An error after a
// frame ends the answer as a line {"error": Status}; one before any frame
// is answered as every other error: its HTTP status and the Status. A
// backup_id in the path wins over one in the body; an empty one
// (/v1/backups/:restore) is the newest backup.
func restoreStream(tc, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/v1/backups/")
		id, isRestore := strings.CutSuffix(id, ":restore")
		if !ok || !isRestore || r.Method != http.MethodPost || strings.Contains(id, "/") {
			next.ServeHTTP(w, r)
			return
		}
		serveRestore(w, r, tc, id)
	})
}

// streamFrameWriteTimeout is how long writing each frame of a stream may
// take: the server's write timeout (listen_limits.http_write_timeout)
// bounds a whole answer, which a restore outlasts.
const streamFrameWriteTimeout = 10 * time.Minute

func serveRestore(w http.ResponseWriter, r *http.Request, tc http.Handler, id string) {
	if r.URL.RawQuery != "" {
		writeStatus(w, http.StatusBadRequest, &statuspb.Status{Code: int32(codes.InvalidArgument),
			Message: "request does not decode: the restore route takes its fields in the body, not the query"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		writeStatus(w, http.StatusBadRequest, &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "request body: " + err.Error()})
		return
	}
	var req sundialv1.RestoreBackupRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := protojson.Unmarshal(body, &req); err != nil {
			writeStatus(w, http.StatusBadRequest, &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "request does not decode: " + err.Error()})
			return
		}
	}
	if id != "" {
		req.BackupId = id
	}
	msg, err := protojson.Marshal(&req)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, &statuspb.Status{Code: int32(codes.Internal), Message: err.Error()})
		return
	}
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg))) //nolint:gosec // at most MaxBodyBytes
	env = append(env, msg...)

	call := r.Clone(r.Context())
	call.URL.Path, call.URL.RawPath, call.RequestURI = sundialv1.Backups_RestoreBackup_FullMethodName, "", ""
	call.Header.Set("Content-Type", "application/connect+json")
	for _, h := range []string{"Content-Length", "Content-Encoding", "Accept-Encoding", "Connect-Content-Encoding", "Connect-Accept-Encoding"} {
		call.Header.Del(h)
	}
	call.Body, call.ContentLength = io.NopCloser(bytes.NewReader(env)), int64(len(env))
	sw := &ndjsonWriter{w: w, rc: http.NewResponseController(w), header: http.Header{}}
	tc.ServeHTTP(sw, call)
	sw.finish()
}

// ndjsonWriter takes the transcoder's Connect streaming answer and writes
// it on as newline-delimited JSON (see restoreStream). It holds back the
// HTTP status until the first frame or the end of the stream.
type ndjsonWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	header http.Header  // the transcoder's headers: Connect's, not passed on
	code   int          // the transcoder's HTTP status; 0 before WriteHeader
	buf    bytes.Buffer // what has not made a whole envelope yet
	frames int          // frames written on
	ended  bool         // the end-of-stream envelope was seen
}

func (s *ndjsonWriter) Header() http.Header { return s.header }

func (s *ndjsonWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}

func (s *ndjsonWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	s.buf.Write(b)
	if s.code != http.StatusOK {
		return len(b), nil // a refusal of the call itself: finish answers it
	}
	for s.buf.Len() >= 5 {
		head := s.buf.Bytes()[:5]
		n := int(binary.BigEndian.Uint32(head[1:]))
		if s.buf.Len() < 5+n {
			break
		}
		flags := head[0]
		payload := s.buf.Next(5 + n)[5:]
		if flags&0x02 != 0 {
			s.end(payload)
			continue
		}
		if err := s.frame(payload); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Flush is a no-op: every frame is flushed as it is written on.
func (s *ndjsonWriter) Flush() {}

// extend gives the next write streamFrameWriteTimeout, however long the
// stream has run.
func (s *ndjsonWriter) extend() { _ = s.rc.SetWriteDeadline(time.Now().Add(streamFrameWriteTimeout)) }

func (s *ndjsonWriter) frame(payload []byte) error {
	s.extend()
	if s.frames == 0 {
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.WriteHeader(http.StatusOK)
	}
	s.frames++
	line := make([]byte, 0, len(payload)+12)
	line = append(append(append(line, `{"result":`...), payload...), "}\n"...)
	if _, err := s.w.Write(line); err != nil {
		return err
	}
	return s.rc.Flush()
}

// connectEnd is a Connect end-of-stream message.
type connectEnd struct {
	Error *struct {
		Code    connect.Code `json:"code"`
		Message string       `json:"message"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	} `json:"error"`
}

// end writes the end of the stream: nothing after a clean end, else the
// error as a last line, or as the answer when no frame was written.
func (s *ndjsonWriter) end(payload []byte) {
	s.ended = true
	s.extend()
	var e connectEnd
	if err := json.Unmarshal(payload, &e); err != nil {
		s.fail(&statuspb.Status{Code: int32(codes.Internal), Message: "undecodable end of stream: " + err.Error()})
		return
	}
	if e.Error == nil {
		if s.frames == 0 {
			s.w.Header().Set("Content-Type", "application/x-ndjson")
			s.w.WriteHeader(http.StatusOK)
		}
		return
	}
	st := &statuspb.Status{Code: int32(e.Error.Code), Message: e.Error.Message} //nolint:gosec // Connect codes are gRPC's
	for _, d := range e.Error.Details {
		v, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			continue
		}
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type, Value: v})
	}
	s.fail(st)
}

// fail ends the answer with st.
func (s *ndjsonWriter) fail(st *statuspb.Status) {
	s.extend()
	if s.frames == 0 {
		writeStatus(s.w, httpStatus(codes.Code(st.GetCode())), st) //nolint:gosec // a gRPC code
		return
	}
	line := append(append([]byte(`{"error":`), marshalStatus(st)...), "}\n"...)
	_, _ = s.w.Write(line)
	_ = s.rc.Flush()
}

// finish answers a call that ended without an end-of-stream envelope: the
// transcoder refused it (its status and body), or it was cut.
func (s *ndjsonWriter) finish() {
	switch {
	case s.ended:
	case s.code != 0 && s.code != http.StatusOK:
		s.fail(&statuspb.Status{Code: int32(codeOfHTTP(s.code)), Message: strings.TrimSpace(s.buf.String())}) //nolint:gosec // a gRPC code
	default:
		s.fail(&statuspb.Status{Code: int32(codes.Internal), Message: "the stream ended without its end"})
	}
}

func writeStatus(w http.ResponseWriter, code int, st *statuspb.Status) {
	body := marshalStatus(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// httpStatus is the HTTP status of a gRPC code, as the transcoder answers
// (docs/http-api.md).
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return 499
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
