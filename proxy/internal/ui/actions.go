package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// maxFormBytes caps an action's form (a test message's payload included).
const maxFormBytes = 2 << 20

// confirmView is the confirmation page of a destructive action: the same
// form again, with confirm=yes.
type confirmView struct {
	Action   string // the form's URL
	Question string
	Back     string   // the page the action is taken on ("No, go back")
	Fields   []header // the form's values, re-posted as hidden fields
}

// actionPage is the page an action is taken on: its confirmation page
// goes back to it, a done action redirects to it with the notice, and a
// failed one shows it with the error.
type actionPage struct {
	nav  string // the tab the confirmation page highlights
	path string // the page's path
	// show renders the page for query q (the page's state an action
	// returns to) with an action's error.
	show func(w http.ResponseWriter, r *http.Request, q url.Values, err *apiError)
}

// act runs one POST taken on page pg: it parses the form, asks for
// confirmation first when question answers one for the form and the form
// lacks confirm=yes, runs do and redirects back to the page with do's
// notice (Post/Redirect/Get), or shows the page with do's error.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, pg actionPage, question func(url.Values) string, do func(ctx context.Context, form url.Values) (string, error)) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		pg.show(w, r, url.Values{}, badInput("form", err.Error()))
		return
	}
	if q := question(r.PostForm); q != "" && r.PostForm.Get("confirm") != "yes" {
		v := &confirmView{Action: r.URL.Path, Question: q, Back: pg.path}
		keys := make([]string, 0, len(r.PostForm))
		for k := range r.PostForm {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v.Fields = append(v.Fields, header{k, r.PostForm.Get(k)})
		}
		h.render(w, r, http.StatusOK, "confirm", &page{Title: "Confirm", Nav: pg.nav, Data: v})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	notice, err := do(ctx, r.PostForm)
	fields := []zap.Field{zap.String("action", path.Base(r.URL.Path))}
	if topic := r.PathValue("topic"); topic != "" {
		fields = append(fields, zap.String("topic", topic))
	}
	fields = append(fields, zap.String("remote_addr", r.RemoteAddr))
	if err != nil {
		h.log.Info("ui action failed", append(fields, zap.Error(err))...)
	} else {
		h.log.Info("ui action", append(fields, zap.String("outcome", notice))...)
	}
	back := backQuery(r.PostForm.Get("back"))
	if err != nil {
		pg.show(w, r, back, toAPIError(err))
		return
	}
	back.Set("notice", notice)
	http.Redirect(w, r, pg.path+"?"+back.Encode(), http.StatusSeeOther)
}

// action runs one POST of the topic page (see act): do gets the path's
// topic; question, when not empty, is asked first.
func (h *Handler) action(w http.ResponseWriter, r *http.Request, question string, do func(ctx context.Context, topic string, form url.Values) (string, error)) {
	topic := r.PathValue("topic")
	pg := actionPage{nav: "topics", path: "/ui/topics/" + url.PathEscape(topic), show: func(w http.ResponseWriter, r *http.Request, q url.Values, err *apiError) {
		h.showTopic(w, r, q, "", err)
	}}
	h.act(w, r, pg, func(url.Values) string { return question }, func(ctx context.Context, form url.Values) (string, error) {
		return do(ctx, topic, form)
	})
}

// backQuery is the topic page's query an action returns to (range,
// filter), without a stale notice or page token.
func backQuery(s string) url.Values {
	q, err := url.ParseQuery(s)
	if err != nil {
		return url.Values{}
	}
	q.Del("notice")
	q.Del("page_token")
	return q
}

func (h *Handler) publish(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "", func(ctx context.Context, topic string, f url.Values) (string, error) {
		m := &sundialv1.Message{Topic: topic, Payload: []byte(f.Get("payload")), Key: strings.TrimSpace(f.Get("key"))}
		d, err := parseDelay("delay", f.Get("delay"))
		if err != nil {
			return "", err
		}
		m.DelayMs = d.Milliseconds()
		if m.Headers, err = parseHeaders(f.Get("headers")); err != nil {
			return "", err
		}
		resp, err := h.api.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: []*sundialv1.Message{m}})
		if err != nil {
			return "", err
		}
		if len(resp.GetResults()) != 1 {
			return "", statusError(int32(codes.Internal), fmt.Sprintf("publish answered %d results for 1 message", len(resp.GetResults())))
		}
		res := resp.GetResults()[0]
		if e := res.GetError(); e != nil {
			return "", statusError(e.GetCode(), e.GetMessage())
		}
		return fmt.Sprintf("published %s, due %s", res.GetMessageId(), formatTime(res.GetDueAtUnixMs())), nil
	})
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "Cancel this message? It is removed from every group.", func(ctx context.Context, topic string, f url.Values) (string, error) {
		sel, err := selector(topic, f)
		if err != nil {
			return "", err
		}
		resp, err := h.api.Producer.Cancel(ctx, &sundialv1.CancelRequest{Message: sel})
		if err != nil {
			return "", err
		}
		return "cancel " + resp.GetMessageId() + ": " + outcome(resp.GetOutcome()), nil
	})
}

func (h *Handler) reschedule(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "", func(ctx context.Context, topic string, f url.Values) (string, error) {
		sel, err := selector(topic, f)
		if err != nil {
			return "", err
		}
		d, err := parseDelay("delay", f.Get("delay"))
		if err != nil {
			return "", err
		}
		return h.move(ctx, sel, d)
	})
}

// deliverNow reschedules a message to now.
func (h *Handler) deliverNow(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "", func(ctx context.Context, topic string, f url.Values) (string, error) {
		sel, err := selector(topic, f)
		if err != nil {
			return "", err
		}
		return h.move(ctx, sel, 0)
	})
}

func (h *Handler) move(ctx context.Context, sel *sundialv1.MessageSelector, d time.Duration) (string, error) {
	resp, err := h.api.Producer.Reschedule(ctx, &sundialv1.RescheduleRequest{Message: sel, DelayMs: d.Milliseconds()})
	if err != nil {
		return "", err
	}
	n := "reschedule " + resp.GetMessageId() + ": " + outcome(resp.GetOutcome())
	if resp.GetOutcome() == sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		n += ", due " + formatTime(resp.GetDueAtUnixMs())
	}
	return n, nil
}

func (h *Handler) redrive(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "", func(ctx context.Context, topic string, f url.Values) (string, error) {
		var n int64
		if s := strings.TrimSpace(f.Get("max_messages")); s != "" {
			var err error
			if n, err = strconv.ParseInt(s, 10, 64); err != nil {
				return "", badInput("max_messages", "want a whole number, got "+strconv.Quote(s))
			}
		}
		resp, err := h.api.Admin.RedriveDeadLetters(ctx, &sundialv1.RedriveDeadLettersRequest{Topic: topic, MaxMessages: n})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("redrove %d dead letters from %s.dlq", resp.GetMoved(), topic), nil
	})
}

func (h *Handler) purge(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "Purge the pending messages? This cannot be undone.", func(ctx context.Context, topic string, f url.Values) (string, error) {
		group := strings.TrimSpace(f.Get("group"))
		resp, err := h.api.Admin.PurgeTopic(ctx, &sundialv1.PurgeTopicRequest{Name: topic, Group: group})
		if err != nil {
			return "", err
		}
		of := "every group"
		if group != "" {
			of = "group " + group
		}
		return fmt.Sprintf("purged %d messages of %s", resp.GetPurged(), of), nil
	})
}

// settings updates the topic settings whose form value differs from the
// topic's current one.
func (h *Handler) settings(w http.ResponseWriter, r *http.Request) {
	h.action(w, r, "", func(ctx context.Context, topic string, f url.Values) (string, error) {
		cur, err := h.api.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: topic})
		if err != nil {
			return "", err
		}
		next := proto.CloneOf(cur)
		next.Stats, next.Groups = nil, nil
		var mask []string
		for _, s := range settingsOf(cur) {
			v, ok := f[s.Name]
			if !ok || strings.TrimSpace(v[0]) == s.Value {
				continue
			}
			if err := s.set(next, strings.TrimSpace(v[0])); err != nil {
				return "", err
			}
			mask = append(mask, s.Name)
		}
		if len(mask) == 0 {
			return "settings unchanged", nil
		}
		if _, err := h.api.Admin.UpdateTopic(ctx, &sundialv1.UpdateTopicRequest{Topic: next, UpdateMask: mask}); err != nil {
			return "", err
		}
		return "updated " + strings.Join(mask, ", "), nil
	})
}

func selector(topic string, f url.Values) (*sundialv1.MessageSelector, error) {
	if id := strings.TrimSpace(f.Get("message_id")); id != "" {
		return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_MessageId{MessageId: id}}, nil
	}
	if key := strings.TrimSpace(f.Get("key")); key != "" {
		return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: key}}, nil
	}
	return nil, badInput("message_id", "name a message by id or key")
}

// parseDelay reads a delay: a duration ("90s", "2h") or whole seconds;
// empty is 0. The API checks its bounds.
func parseDelay(field, s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > int64(1<<62)/int64(time.Second) || n < -int64(1<<62)/int64(time.Second) {
			return 0, badInput(field, "out of range: "+s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badInput(field, "want a duration (90s, 2h) or whole seconds, got "+strconv.Quote(s))
	}
	return d, nil
}

// parseHeaders reads "key=value" lines; blank lines are skipped.
func parseHeaders(s string) (map[string]string, error) {
	var out map[string]string
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, badInput("headers", fmt.Sprintf("line %d: want key=value, got %q", i+1, line))
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

func outcome(o sundialv1.ChangeOutcome) string {
	return strings.TrimPrefix(o.String(), "CHANGE_OUTCOME_")
}
