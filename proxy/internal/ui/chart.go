package ui

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// chartSpan is one range of the due-time chart: DueHistogram buckets of
// one width from the start of the current bucket.
type chartSpan struct {
	bucket  sundialv1.HistogramBucket
	width   time.Duration
	buckets int
}

// chartSpans are the ranges the Topic page offers (the API counts per
// minute or per hour, so "minute" is the current and the next minute).
var chartSpans = map[string]chartSpan{
	"minute": {sundialv1.HistogramBucket_HISTOGRAM_BUCKET_MINUTE, time.Minute, 2},
	"hour":   {sundialv1.HistogramBucket_HISTOGRAM_BUCKET_MINUTE, time.Minute, 60},
	"day":    {sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR, time.Hour, 24},
	"week":   {sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR, time.Hour, 168},
}

var chartRanges = []string{"minute", "hour", "day", "week"}

// histogramRequest asks for the span's buckets from the start of the
// bucket holding now.
func histogramRequest(topic, group, span string, now time.Time) *sundialv1.DueHistogramRequest {
	s := chartSpans[span]
	w := s.width.Milliseconds()
	from := now.UnixMilli() - now.UnixMilli()%w
	return &sundialv1.DueHistogramRequest{Topic: topic, Group: group, Bucket: s.bucket, FromUnixMs: from, ToUnixMs: from + int64(s.buckets)*w}
}

// Chart geometry, in SVG user units.
const (
	chartWidth  = 720
	chartHeight = 200
	chartLeft   = 48 // room for the count axis
	chartBottom = 24 // room for the time axis
)

// chart is the due-time histogram laid out as SVG bars.
type chart struct {
	Width, Height int
	Left, Bottom  int // plot area edges
	Top           int
	Bars          []bar
	Ticks         []tick
	Max           int64
	Total         int64
}

type bar struct {
	X, Y, W, H float64
	Count      int64
	Label      string // "10:42 UTC: 17 messages", the bar's tooltip
}

type tick struct {
	X     float64
	Label string
}

// buildChart lays out one bar per bucket of req (empty buckets are flat)
// with heights scaled to the fullest bucket. It is pure: the page, tests
// and screenshots see the same geometry for the same counts.
func buildChart(req *sundialv1.DueHistogramRequest, counts []*sundialv1.HistogramCount) *chart {
	width := int64(60_000)
	if req.GetBucket() == sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR {
		width = 3_600_000
	}
	n := int((req.GetToUnixMs() - req.GetFromUnixMs()) / width)
	if n < 1 {
		n = 1
	}
	per := make([]int64, n)
	c := &chart{Width: chartWidth, Height: chartHeight, Left: chartLeft, Bottom: chartHeight - chartBottom, Top: 8}
	for _, hc := range counts {
		i := int((hc.GetStartUnixMs() - req.GetFromUnixMs()) / width)
		if i >= 0 && i < n {
			per[i] += hc.GetCount()
		}
		c.Total += hc.GetCount()
	}
	for _, v := range per {
		c.Max = max(c.Max, v)
	}
	plotW := float64(chartWidth - chartLeft - 8)
	plotH := float64(c.Bottom - c.Top)
	slot := plotW / float64(n)
	layout := "15:04"
	if width == 3_600_000 && n > 24 {
		layout = "Mon 15:04"
	}
	tickEvery := max(1, n/6)
	for i, v := range per {
		x := float64(chartLeft) + float64(i)*slot
		h := 0.0
		if c.Max > 0 {
			h = plotH * float64(v) / float64(c.Max)
		}
		if v > 0 && h < 1 {
			h = 1
		}
		start := time.UnixMilli(req.GetFromUnixMs() + int64(i)*width).UTC()
		c.Bars = append(c.Bars, bar{
			X: x + slot*0.1, Y: float64(c.Bottom) - h, W: slot * 0.8, H: h, Count: v,
			Label: start.Format(layout) + " UTC: " + strconv.FormatInt(v, 10) + " messages",
		})
		if i%tickEvery == 0 {
			c.Ticks = append(c.Ticks, tick{X: x, Label: start.Format(layout)})
		}
	}
	return c
}

// maxPayloadShown caps the bytes of a payload the browser shows.
const maxPayloadShown = 4096

// payloadView is a payload rendered as text, JSON or hex.
type payloadView struct {
	Text      string
	Note      string // why the view differs from the one asked for
	Bytes     int
	Truncated bool
}

// viewPayload renders p as view ("text", "json" or "hex"): text needs
// UTF-8 and JSON valid JSON, else the payload is shown as hex with a note.
func viewPayload(p []byte, view string) payloadView {
	out := payloadView{Bytes: len(p)}
	shown := p
	if len(shown) > maxPayloadShown {
		shown, out.Truncated = shown[:maxPayloadShown], true
	}
	switch view {
	case "json":
		var buf bytes.Buffer
		if err := json.Indent(&buf, p, "", "  "); err == nil {
			out.Text = buf.String()
			if len(out.Text) > maxPayloadShown {
				out.Text, out.Truncated = out.Text[:maxPayloadShown], true
			}
			return out
		}
		out.Note = "not valid JSON; shown as hex"
	case "hex":
	default:
		if text, ok := validText(shown, out.Truncated); ok {
			out.Text = text
			return out
		}
		out.Note = "not UTF-8 text; shown as hex"
	}
	out.Text = hex.Dump(shown)
	return out
}

// validText is b as a string when it is UTF-8; a truncated b may end in
// the first bytes of a rune, which are dropped.
func validText(b []byte, truncated bool) (string, bool) {
	for cut := 0; cut < utf8.UTFMax && cut <= len(b); cut++ {
		if utf8.Valid(b[:len(b)-cut]) {
			return string(b[:len(b)-cut]), true
		}
		if !truncated {
			break
		}
	}
	return "", false
}
