package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
)

// palette gives each system configuration a stable colour.
var palette = map[string]string{
	"sundial": "#d62728", "redis-always": "#1f77b4", "redis-everysec": "#6baed6",
	"beanstalkd-f0": "#2ca02c", "beanstalkd-f1000": "#98df8a", "nats-always": "#9467bd", "nats-default": "#c5b0d5",
}

type series struct {
	name string
	cdf  []scenario.Quantile
}

// LogScale maps v (ms, clamped to [lo, hi]) onto [0, 1] logarithmically.
func LogScale(v, lo, hi float64) float64 {
	v = math.Min(math.Max(v, lo), hi)
	return (math.Log10(v) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
}

// SVG writes a chart of the lateness distributions (CDFs, log-scale
// lateness) of the precision and burst scenarios, one line per system. It
// builds the chart in memory and returns w's error from the one write.
func (rep Report) SVG(w io.Writer) error {
	panels := []struct {
		title string
		data  []series
	}{
		{"Precision: lateness CDF at " + fmt.Sprint(rep.Config.Precision.Rate) + " msgs/s", nil},
		{"Burst: lateness CDF, all due at once", nil},
	}
	for _, r := range rep.Runs {
		switch {
		case r.Precision != nil && len(r.Precision.LatenessCDF) > 0:
			panels[0].data = append(panels[0].data, series{r.Name, r.Precision.LatenessCDF})
		case r.Burst != nil && len(r.Burst.LatenessCDF) > 0:
			panels[1].data = append(panels[1].data, series{r.Name, r.Burst.LatenessCDF})
		}
	}
	const (
		pw, ph           = 520.0, 340.0 // panel plot area
		left, top, gap   = 60.0, 40.0, 90.0
		legendH          = 30.0
		width            = left + 2*pw + gap + 30
		height           = top + ph + 60 + legendH
		loMs             = 0.1
		minTop, maxTopMs = 10.0, 1e6
	)
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for pi, p := range panels {
		x0 := left + float64(pi)*(pw+gap)
		hiMs := minTop
		for _, s := range p.data {
			for _, q := range s.cdf {
				hiMs = math.Max(hiMs, float64(q.Value)/float64(time.Millisecond))
			}
		}
		hiMs = math.Min(math.Pow(10, math.Ceil(math.Log10(hiMs))), maxTopMs)
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" font-size="14" font-weight="bold">%s</text>`+"\n", x0, top-15, html.EscapeString(p.title))
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", x0, top, pw, ph)
		for d := loMs; d <= hiMs*1.0001; d *= 10 {
			x := x0 + LogScale(d, loMs, hiMs)*pw
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, top, x, top+ph)
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+16, axisMs(d))
		}
		for _, q := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
			y := top + ph - q*ph
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, y, x0+pw, y)
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="end">%g</text>`+"\n", x0-5, y+4, q)
		}
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">lateness (log scale; ≤ 0.1 ms drawn at 0.1 ms)</text>`+"\n", x0+pw/2, top+ph+34)
		fmt.Fprintf(&sb, `<text transform="translate(%.1f,%.1f) rotate(-90)" text-anchor="middle">fraction delivered</text>`+"\n", x0-42, top+ph/2)
		if len(p.data) == 0 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#888">no data</text>`+"\n", x0+pw/2, top+ph/2)
		}
		for _, s := range p.data {
			var pts []string
			for _, q := range s.cdf {
				x := x0 + LogScale(float64(q.Value)/float64(time.Millisecond), loMs, hiMs)*pw
				y := top + ph - q.Q*ph
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`+"\n", colour(s.name), strings.Join(pts, " "), html.EscapeString(s.name))
		}
	}
	// Legend: every system that appears anywhere.
	seen := map[string]bool{}
	lx, ly := left, top+ph+60
	for _, p := range panels {
		for _, s := range p.data {
			if seen[s.name] {
				continue
			}
			seen[s.name] = true
			fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly, lx+20, ly, colour(s.name))
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+25, ly+4, html.EscapeString(s.name))
			lx += 40 + 7*float64(len(s.name))
		}
	}
	sb.WriteString("</svg>\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

func colour(name string) string {
	if c, ok := palette[name]; ok {
		return c
	}
	return "#7f7f7f"
}

func axisMs(d float64) string {
	switch {
	case d < 1:
		return fmt.Sprintf("%g ms", d)
	case d < 1000:
		return fmt.Sprintf("%.0f ms", d)
	default:
		return fmt.Sprintf("%.0f s", d/1000)
	}
}
