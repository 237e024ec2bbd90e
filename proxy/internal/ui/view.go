package ui

import (
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// setting is one editable topic setting: the UpdateTopic mask name, its
// current value as the form shows it, and how a form value sets it.
type setting struct {
	Name, Help, Value string
	set               func(t *sundialv1.Topic, v string) error
}

func intSetting(name, help string, cur int64, set func(*sundialv1.Topic, int64)) setting {
	return setting{Name: name, Help: help, Value: strconv.FormatInt(cur, 10), set: func(t *sundialv1.Topic, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return badInput(name, "want a whole number, got "+strconv.Quote(v))
		}
		set(t, n)
		return nil
	}}
}

// settingsOf lists the settings UpdateTopic can change, with t's values.
func settingsOf(t *sundialv1.Topic) []setting {
	return []setting{
		intSetting("visibility_timeout_ms", "lease of a delivery, ms", t.GetVisibilityTimeoutMs(), func(t *sundialv1.Topic, n int64) { t.VisibilityTimeoutMs = n }),
		intSetting("max_attempts", "deliveries before the dead-letter topic", int64(t.GetMaxAttempts()), func(t *sundialv1.Topic, n int64) { t.MaxAttempts = int32(clampInt32(n)) }),
		intSetting("retention_ms", "0 keeps until completed", t.GetRetentionMs(), func(t *sundialv1.Topic, n int64) { t.RetentionMs = n }),
		intSetting("max_message_bytes", "largest payload", t.GetMaxMessageBytes(), func(t *sundialv1.Topic, n int64) { t.MaxMessageBytes = n }),
		intSetting("dedup_window_ms", "how long a done key is remembered", t.GetDedupWindowMs(), func(t *sundialv1.Topic, n int64) { t.DedupWindowMs = n }),
		{Name: "release_rate_per_sec", Help: "deliveries per second, 0 unlimited", Value: strconv.FormatFloat(t.GetReleaseRatePerSec(), 'g', -1, 64), set: func(t *sundialv1.Topic, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return badInput("release_rate_per_sec", "want a number, got "+strconv.Quote(v))
			}
			t.ReleaseRatePerSec = f
			return nil
		}},
		intSetting("jitter_ms", "random spread of due times", t.GetJitterMs(), func(t *sundialv1.Topic, n int64) { t.JitterMs = n }),
		intSetting("backoff_base_ms", "nack backoff base", t.GetBackoffBaseMs(), func(t *sundialv1.Topic, n int64) { t.BackoffBaseMs = n }),
		intSetting("backoff_max_ms", "nack backoff cap", t.GetBackoffMaxMs(), func(t *sundialv1.Topic, n int64) { t.BackoffMaxMs = n }),
	}
}

// clampInt32 keeps an out-of-range value out of range in int32 too, so
// the API refuses it instead of seeing a wrapped number.
func clampInt32(n int64) int64 {
	return min(max(n, -1<<31), 1<<31-1)
}

func statusError(code int32, msg string) error {
	return status.Error(codes.Code(code), msg)
}

// formatTime shows a unix-ms time in UTC; 0 is "-".
func formatTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// relative says how far ms is from now: "in 4m10s", "12s ago".
func relative(ms int64, now time.Time) string {
	if ms == 0 {
		return ""
	}
	d := time.UnixMilli(ms).Sub(now).Round(time.Second)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// ago says how long before now ms was, "12s ago"; a time past now (the
// meta leader's clock ahead of this one) is "0s ago".
func ago(ms int64, now time.Time) string {
	return max(0, now.Sub(time.UnixMilli(ms))).Round(time.Second).String() + " ago"
}

func formatMs(ms float64) string {
	switch {
	case ms == 0:
		return "-"
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	case ms < 10_000:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

var funcs = template.FuncMap{
	"time":     formatTime,
	"relative": func(ms int64) string { return relative(ms, time.Now()) },
	"ms":       formatMs,
	"age":      func(ms int64) string { return formatMs(float64(ms)) },
	"state":    func(s sundialv1.NodeState) string { return strings.TrimPrefix(s.String(), "NODE_STATE_") },
	"copy":     func(s sundialv1.CopyState) string { return strings.TrimPrefix(s.String(), "COPY_STATE_") },
	"kind":     func(k sundialv1.TopicKind) string { return strings.TrimPrefix(k.String(), "TOPIC_KIND_") },
	"f1":       func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"path":     url.PathEscape,
	// withRange is the page query of the filter f with chart range r:
	// the tabs link to it and actions return to it.
	"withRange": pageQuery,
	// href joins a path and an encoded query into a link; html/template
	// would otherwise escape the query's = and & as data.
	"href": func(path, query string) template.URL { return template.URL(path + "?" + query) },
}
