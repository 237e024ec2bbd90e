package ui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// RefreshInterval is how often htmx reloads the live parts of a page.
const RefreshInterval = 5 * time.Second

// callTimeout bounds the API calls of one page or action.
const callTimeout = 10 * time.Second

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// API is the proxy's public API as a client sees it.
type API struct {
	Admin    sundialv1.AdminClient
	Producer sundialv1.ProducerClient
	Cluster  sundialv1.ClusterClient
	Backups  sundialv1.BackupsClient
}

// Handler serves the admin UI under /ui/.
type Handler struct {
	api   API
	log   *zap.Logger
	now   func() time.Time
	pages map[string]*template.Template
	mux   *http.ServeMux
	csrf  *http.CrossOriginProtection
	opts  Options
}

// New builds the UI over api. log may be nil.
func New(api API, log *zap.Logger, opts Options) *Handler {
	if log == nil {
		log = zap.NewNop()
	}
	h := &Handler{api: api, log: log, now: time.Now, pages: parsePages(), opts: opts}
	h.csrf = http.NewCrossOriginProtection()
	h.csrf.SetDenyHandler(http.HandlerFunc(h.denied))

	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/topics", http.StatusSeeOther)
	})
	m.HandleFunc("GET /ui/login", func(w http.ResponseWriter, r *http.Request) {
		h.loginPage(w, r, http.StatusOK, "", "")
	})
	m.HandleFunc("POST /ui/login", h.login)
	m.HandleFunc("POST /ui/logout", h.logout)
	m.HandleFunc("GET /ui/cluster", h.clusterPage)
	m.HandleFunc("POST /ui/cluster/backup-now", h.backupNow)
	m.HandleFunc("POST /ui/cluster/backup-schedule", h.setBackupSchedule)
	m.HandleFunc("POST /ui/cluster/clear-backup-schedule", h.clearBackupSchedule)
	m.HandleFunc("GET /ui/topics", h.topicsPage)
	m.HandleFunc("GET /ui/topics/{topic}", h.topicPage)
	m.HandleFunc("POST /ui/topics/{topic}/publish", h.publish)
	m.HandleFunc("POST /ui/topics/{topic}/cancel", h.cancel)
	m.HandleFunc("POST /ui/topics/{topic}/reschedule", h.reschedule)
	m.HandleFunc("POST /ui/topics/{topic}/deliver-now", h.deliverNow)
	m.HandleFunc("POST /ui/topics/{topic}/redrive", h.redrive)
	m.HandleFunc("POST /ui/topics/{topic}/purge", h.purge)
	m.HandleFunc("POST /ui/topics/{topic}/settings", h.settings)
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		h.render(w, r, http.StatusNotFound, "error", &page{Title: "Not found", Err: &apiError{
			HTTPStatus: http.StatusNotFound, Code: "NotFound", Message: "no page " + r.URL.Path,
		}})
	})
	h.mux = m
	return h
}

// ServeHTTP serves every path under /ui/; POSTs must come from this
// origin. The request's credential (see withSession) goes with every call
// the UI makes for it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.csrf.Handler(h.withSession(h.mux)).ServeHTTP(w, r)
}

func (h *Handler) denied(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusForbidden, "error", &page{Title: "Refused", Err: &apiError{
		HTTPStatus: http.StatusForbidden, Code: "PermissionDenied",
		Message: "cross-origin request refused: actions are accepted only from pages of this UI",
	}})
}

var pageNames = []string{"cluster", "topics", "topic", "confirm", "error", "login"}

func parsePages() map[string]*template.Template {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t := template.New("layout.html").Funcs(funcs)
		out[name] = template.Must(t.ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}

// page is what every template gets; Data is the page's own view.
type page struct {
	Title   string
	Nav     string // "cluster" or "topics": the highlighted tab
	Notice  string
	Err     *apiError
	Refresh string // htmx trigger of the live parts, e.g. "every 5s"
	Self    string // the URL the live parts refresh from
	Data    any
	// SignedIn shows the sign-out button (Options.Login, a session).
	SignedIn bool
}

// render executes the page into a buffer first, so a template error
// answers 500 with a message instead of half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, code int, name string, p *page) {
	if h.opts.Login && name != "login" && p.Err != nil && p.Err.Code == codes.Unauthenticated.String() {
		// The session's token was revoked or expired since sign-in.
		h.endSession(w)
		h.loginPage(w, r, http.StatusUnauthorized, r.URL.RequestURI(), "Your session ended (its token was revoked or expired): sign in again.")
		return
	}
	p.SignedIn = h.opts.Login && name != "login" && bearerOf(r) != ""
	if p.Refresh == "" {
		p.Refresh = fmt.Sprintf("every %ds", int(RefreshInterval/time.Second))
	}
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, p); err != nil {
		h.log.Error("render ui page", zap.String("page", name), zap.String("path", r.URL.Path), zap.Error(err))
		http.Error(w, "ui: cannot render page "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// apiError is an API error as the page shows it.
type apiError struct {
	HTTPStatus int
	Code       string
	Message    string
	Fields     []fieldViolation
}

type fieldViolation struct{ Field, Description string }

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// toAPIError turns an API call's error into what the page shows: the
// gRPC code and message, the field violations of a BadRequest detail,
// and the HTTP status for the code.
func toAPIError(err error) *apiError {
	if err == nil {
		return nil
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	st := status.Convert(err)
	if errors.Is(err, context.DeadlineExceeded) {
		st = status.New(codes.DeadlineExceeded, err.Error())
	}
	out := &apiError{HTTPStatus: httpStatus(st.Code()), Code: st.Code().String(), Message: st.Message()}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out.Fields = append(out.Fields, fieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return out
}

// badInput is a form value the UI cannot turn into a request.
func badInput(field, description string) *apiError {
	return &apiError{
		HTTPStatus: http.StatusBadRequest, Code: codes.InvalidArgument.String(), Message: "invalid form value",
		Fields: []fieldViolation{{Field: field, Description: description}},
	}
}

// httpStatus maps a gRPC code to the HTTP status a page answers with.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted, codes.FailedPrecondition:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return 499 // the client went away
	}
	return http.StatusInternalServerError
}
