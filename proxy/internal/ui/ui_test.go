package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestBuildChart(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 30, 15, 0, time.UTC)
	req := histogramRequest("t", "", "hour", now)
	if want := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC).UnixMilli(); req.FromUnixMs != want || req.ToUnixMs != want+60*60_000 {
		t.Fatalf("histogramRequest(hour) = [%d, %d), want [%d, +1h)", req.FromUnixMs, req.ToUnixMs, want)
	}
	c := buildChart(req, []*sundialv1.HistogramCount{
		{StartUnixMs: req.FromUnixMs, Count: 4},
		{StartUnixMs: req.FromUnixMs + 10*60_000, Count: 1},
	})
	if len(c.Bars) != 60 || c.Total != 5 || c.Max != 4 {
		t.Fatalf("buildChart() = %d bars, total %d, max %d, want 60, 5, 4", len(c.Bars), c.Total, c.Max)
	}
	full := float64(c.Bottom - c.Top)
	if c.Bars[0].H != full || c.Bars[10].H != full/4 || c.Bars[1].H != 0 {
		t.Errorf("bar heights = %v, %v, %v, want %v, %v, 0", c.Bars[0].H, c.Bars[10].H, c.Bars[1].H, full, full/4)
	}
	if c.Bars[10].Label != "10:40 UTC: 1 messages" {
		t.Errorf("bar 10 label = %q", c.Bars[10].Label)
	}
	week := histogramRequest("t", "", "week", now)
	if week.Bucket != sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR || (week.ToUnixMs-week.FromUnixMs)/3_600_000 != 168 {
		t.Errorf("histogramRequest(week) = %v", week)
	}
}

func TestViewPayload(t *testing.T) {
	tests := []struct {
		name, view string
		in         []byte
		want, note string
	}{
		{"text", "text", []byte("héllo"), "héllo", ""},
		{"json indented", "json", []byte(`{"a":[1,2]}`), "{\n  \"a\": [\n    1,\n    2\n  ]\n}", ""},
		{"bad json as hex", "json", []byte("{"), "00000000  7b", "not valid JSON; shown as hex"},
		{"binary as hex", "text", []byte{0xff, 0x00}, "00000000  ff 00", "not UTF-8 text; shown as hex"},
		{"hex", "hex", []byte("ab"), "00000000  61 62", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := viewPayload(tt.in, tt.view)
			if !strings.HasPrefix(got.Text, tt.want) || got.Note != tt.note {
				t.Errorf("viewPayload(%q, %s) = %q (note %q), want %q (note %q)", tt.in, tt.view, got.Text, got.Note, tt.want, tt.note)
			}
		})
	}
	// A long text cut inside a rune stays text.
	long := []byte(strings.Repeat("a", maxPayloadShown-1) + "é")
	if got := viewPayload(long, "text"); !got.Truncated || got.Note != "" || len(got.Text) != maxPayloadShown-1 {
		t.Errorf("viewPayload(long) truncated %v note %q len %d", got.Truncated, got.Note, len(got.Text))
	}
}

func TestParseInputs(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	if got, err := parseWhen("from", "-10s", now); err != nil || got != 990_000 {
		t.Errorf("parseWhen(-10s) = %d, %v", got, err)
	}
	if got, err := parseWhen("from", "1970-01-01T00:00:02Z", now); err != nil || got != 2000 {
		t.Errorf("parseWhen(RFC 3339) = %d, %v", got, err)
	}
	if _, err := parseWhen("to", "soon", now); err == nil || err.Fields[0].Field != "to" {
		t.Errorf("parseWhen(soon) error = %v, want one naming to", err)
	}
	for in, want := range map[string]time.Duration{"": 0, "90": 90 * time.Second, "2h": 2 * time.Hour} {
		if got, err := parseDelay("delay", in); err != nil || got != want {
			t.Errorf("parseDelay(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	if _, err := parseDelay("delay", "later"); err == nil {
		t.Errorf("parseDelay(later) error = nil")
	}
	if h, err := parseHeaders("a=1\n\n b = 2 \n"); err != nil || h["a"] != "1" || h["b"] != "2" {
		t.Errorf("parseHeaders() = %v, %v", h, err)
	}
}

func TestHTTPStatus(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.InvalidArgument: 400, codes.NotFound: 404, codes.AlreadyExists: 409, codes.FailedPrecondition: 409,
		codes.ResourceExhausted: 429, codes.Unavailable: 503, codes.Internal: 500, codes.Unknown: 500,
	} {
		if got := httpStatus(c); got != want {
			t.Errorf("httpStatus(%v) = %d, want %d", c, got, want)
		}
	}
}

// TestCrossOriginPostRefused: a POST from another site is refused before
// any API call (the API here is empty and would panic if reached).
func TestCrossOriginPostRefused(t *testing.T) {
	h := New(API{}, nil, Options{})
	req := httptest.NewRequest(http.MethodPost, "/ui/topics/t/purge", strings.NewReader("confirm=yes"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "cross-origin request refused") {
		t.Fatalf("cross-site POST = %d %s, want 403 with the reason", rec.Code, rec.Body)
	}
}
