package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/sundialmq/sundial/loadtest/internal/target"
)

// The broker's Raft log fsync metrics: a counter of fsyncs and a histogram
// of their latency. Either may be missing (a broker older than them): the
// report then says "–".
const (
	FsyncsMetric       = "sundial_broker_raft_log_fsyncs_total"
	FsyncSecondsMetric = "sundial_broker_raft_log_fsync_duration_seconds"
)

const (
	// profileChunk is the length of one /debug/pprof/profile request
	// (whole seconds: the handler's unit). A window is profiled as
	// back-to-back chunks until it ends, so its length need not be known
	// when it begins; the last chunk runs past the end by less than one.
	profileChunk = time.Second
	// fetchTimeout bounds one request beyond the profile's own length.
	fetchTimeout = 10 * time.Second
)

// WindowProfile is what the CPU profiles and the fsync counters of a
// Sundial run's server processes show over the scenario's measured
// window, all taken in the same run.
type WindowProfile struct {
	// Window names it: "publish" (throughput), "drain" (burst, from the
	// first delivery), "steady" (precision).
	Window  string  `json:"window"`
	Seconds float64 `json:"seconds"`
	// Messages is what the window moved (the per-1M figures' divisor).
	Messages uint64 `json:"messages"`
	// Processes has one profile per server process, brokers first.
	Processes []ProcessProfile `json:"processes,omitempty"`
	// Roles sums Processes by role (all brokers together, the proxy).
	Roles      []RoleProfile `json:"roles,omitempty"`
	Fsync      *Fsync        `json:"fsync,omitempty"`
	FsyncError string        `json:"fsync_error,omitempty"`
	// Error says why there is nothing (the window was not seen).
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// ProcessProfile is one process's CPU over the window, by category; nil
// CPU when its profile could not be fetched (Error says why).
type ProcessProfile struct {
	Role  string     `json:"role"`
	Name  string     `json:"name"`
	CPU   *Breakdown `json:"cpu,omitempty"`
	Error string     `json:"error,omitempty"`
}

// RoleProfile is the CPU of every process of a role; nil CPU when any of
// them has none.
type RoleProfile struct {
	Role      string     `json:"role"`
	Processes int        `json:"processes"`
	CPU       *Breakdown `json:"cpu,omitempty"`
}

// role is the profile of role in w, or nil.
func (w *WindowProfile) role(role string) *RoleProfile {
	if w == nil {
		return nil
	}
	for i := range w.Roles {
		if w.Roles[i].Role == role {
			return &w.Roles[i]
		}
	}
	return nil
}

// Fsync is the Raft log fsyncs of every broker over a window.
type Fsync struct {
	Brokers    int     `json:"brokers"`
	Count      float64 `json:"count"`
	PerSecond  float64 `json:"per_second"`
	PerMillion float64 `json:"per_million_messages"`
	// MeanSeconds is the mean fsync latency; 0 when the brokers have no
	// latency histogram or nothing was fsynced.
	MeanSeconds float64 `json:"mean_seconds,omitempty"`
}

// windowProbe profiles a set of server processes and scrapes the brokers'
// fsync metrics between the two calls of window (true, then false), which
// a scenario's hook makes. window never blocks: fetches and scrapes run on
// goroutines that result joins.
type windowProbe struct {
	name   string
	eps    []target.Endpoint
	ctx    context.Context
	client *http.Client
	wg     sync.WaitGroup
	stop   chan struct{}
	// scrapedBefore is closed once the scrapes at the begin are done: the
	// scrapes at the end wait for it, however short the window.
	scrapedBefore chan struct{}

	mu         sync.Mutex // guards the fields below
	begin, end time.Time
	chunks     [][]*profile.Profile // per endpoint
	errs       []error              // per endpoint
	before     []fsyncSample        // per endpoint (brokers only)
	after      []fsyncSample
	scrapeErr  error
}

func newWindowProbe(ctx context.Context, name string, eps []target.Endpoint) *windowProbe {
	return &windowProbe{
		name: name, eps: eps, ctx: ctx, client: &http.Client{}, stop: make(chan struct{}), scrapedBefore: make(chan struct{}),
		chunks: make([][]*profile.Profile, len(eps)), errs: make([]error, len(eps)),
		before: make([]fsyncSample, len(eps)), after: make([]fsyncSample, len(eps)),
	}
}

// window begins (true) or ends (false) the measured window; a second
// begin or an end without a begin is ignored.
func (w *windowProbe) window(begin bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	switch {
	case begin && w.begin.IsZero():
		w.begin = now
		for i, ep := range w.eps {
			w.wg.Add(1)
			go w.profileLoop(i, ep.Pprof())
		}
		w.scrapeAll(w.before, false)
	case !begin && !w.begin.IsZero() && w.end.IsZero():
		w.end = now
		close(w.stop)
		w.scrapeAll(w.after, true)
	}
}

// scrapeAll reads every broker's fsync metrics into into, on goroutines;
// after the scrapes into w.before are done, when after is set.
func (w *windowProbe) scrapeAll(into []fsyncSample, after bool) {
	var scraped sync.WaitGroup
	for i, ep := range w.eps {
		if ep.Role != target.RoleBrokers {
			continue
		}
		w.wg.Add(1)
		scraped.Add(1)
		go func() {
			defer w.wg.Done()
			defer scraped.Done()
			if after {
				<-w.scrapedBefore
			}
			s, err := scrapeFsync(w.ctx, w.client, ep.Addr)
			w.mu.Lock()
			defer w.mu.Unlock()
			if err != nil && w.scrapeErr == nil {
				w.scrapeErr = fmt.Errorf("%s: %w", ep.Name, err)
			}
			into[i] = s
		}()
	}
	if !after {
		go func() { scraped.Wait(); close(w.scrapedBefore) }()
	}
}

// profileLoop fetches back-to-back profiles of endpoint i until the
// window ends (at least one, however short the window) or a fetch fails.
func (w *windowProbe) profileLoop(i int, addr string) {
	defer w.wg.Done()
	for {
		p, err := fetchProfile(w.ctx, w.client, addr, profileChunk)
		w.mu.Lock()
		if err != nil {
			w.errs[i] = err
			w.mu.Unlock()
			return
		}
		w.chunks[i] = append(w.chunks[i], p)
		w.mu.Unlock()
		select {
		case <-w.stop:
			return
		default:
		}
	}
}

// result ends the window if the scenario did not (it failed midway), waits
// for every fetch and scrape, and sums them up; msgs is what the window
// moved, given its length in seconds. With dir set, each process's profile (its chunks merged) is
// written there as <prefix>-<process>.pprof.
func (w *windowProbe) result(msgs func(seconds float64) uint64, dir, prefix string) *WindowProfile {
	w.mu.Lock()
	seen := !w.begin.IsZero()
	w.mu.Unlock()
	out := &WindowProfile{Window: w.name}
	if !seen {
		out.Error = fmt.Sprintf("the %s window was not seen", w.name)
		return out
	}
	w.window(false)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	out.Seconds = w.end.Sub(w.begin).Seconds()
	out.Messages = msgs(out.Seconds)
	roles := map[string]int{} // index in out.Roles
	for i, ep := range w.eps {
		pp := ProcessProfile{Role: ep.Role, Name: ep.Name}
		b, err := w.breakdown(i, dir, prefix+"-"+ep.Name+".pprof")
		if err != nil {
			pp.Error = err.Error()
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s profile: %v", ep.Name, err))
		} else {
			pp.CPU = &b
		}
		out.Processes = append(out.Processes, pp)
		j, ok := roles[ep.Role]
		if !ok {
			j = len(out.Roles)
			roles[ep.Role] = j
			out.Roles = append(out.Roles, RoleProfile{Role: ep.Role, CPU: &Breakdown{}})
		}
		rp := &out.Roles[j]
		rp.Processes++
		if rp.CPU != nil && pp.CPU != nil {
			sum := rp.CPU.add(*pp.CPU)
			rp.CPU = &sum
		} else {
			rp.CPU = nil
		}
	}
	out.Fsync, out.FsyncError = w.fsync(out.Seconds, out.Messages)
	return out
}

// breakdown merges endpoint i's chunks, writes them to dir/name when dir
// is set, and classifies them. Callers hold w.mu.
func (w *windowProbe) breakdown(i int, dir, name string) (Breakdown, error) {
	if w.errs[i] != nil {
		return Breakdown{}, w.errs[i]
	}
	if len(w.chunks[i]) == 0 {
		return Breakdown{}, errors.New("no profile fetched")
	}
	p, err := profile.Merge(w.chunks[i])
	if err != nil {
		return Breakdown{}, fmt.Errorf("merge %d profiles: %w", len(w.chunks[i]), err)
	}
	if dir != "" {
		if err := writeProfile(filepath.Join(dir, name), p); err != nil {
			return Breakdown{}, err
		}
	}
	return Classify(p), nil
}

func writeProfile(path string, p *profile.Profile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(p.Write(f), f.Close())
}

// fsync sums the brokers' fsync counters over the window. Callers hold
// w.mu.
func (w *windowProbe) fsync(seconds float64, msgs uint64) (*Fsync, string) {
	if w.scrapeErr != nil {
		return nil, w.scrapeErr.Error()
	}
	f := &Fsync{}
	var sum, count float64
	hist := true
	for i, ep := range w.eps {
		if ep.Role != target.RoleBrokers {
			continue
		}
		b, a := w.before[i], w.after[i]
		n, ok := fsyncsBetween(b, a)
		if !ok {
			return nil, fmt.Sprintf("the brokers export no %s (a broker older than the metric)", FsyncsMetric)
		}
		f.Brokers++
		f.Count += n
		if !b.hasHist || !a.hasHist {
			hist = false
			continue
		}
		sum += a.sum - b.sum
		count += a.count - b.count
	}
	if f.Brokers == 0 {
		return nil, "no brokers"
	}
	if seconds > 0 {
		f.PerSecond = f.Count / seconds
	}
	if msgs > 0 {
		f.PerMillion = f.Count * 1e6 / float64(msgs)
	}
	if hist && count > 0 {
		f.MeanSeconds = sum / count
	}
	return f, ""
}

// fsyncSample is one broker's fsync metrics at one moment.
type fsyncSample struct {
	fsyncs   float64
	hasCount bool
	// sum and count are the latency histogram's _sum and _count.
	sum, count float64
	hasHist    bool
}

// fsyncsBetween is how many fsyncs happened from b to a: the counter's
// difference, else the histogram's count's; false when neither metric is
// in both samples.
func fsyncsBetween(b, a fsyncSample) (float64, bool) {
	switch {
	case b.hasCount && a.hasCount:
		return a.fsyncs - b.fsyncs, true
	case b.hasHist && a.hasHist:
		return a.count - b.count, true
	}
	return 0, false
}

// parseFsync reads the fsync metrics from a Prometheus text exposition,
// summing every series of each (whatever its labels).
func parseFsync(r io.Reader) (fsyncSample, error) {
	var s fsyncSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		var into *float64
		switch name {
		case FsyncsMetric:
			into, s.hasCount = &s.fsyncs, true
		case FsyncSecondsMetric + "_sum":
			into, s.hasHist = &s.sum, true
		case FsyncSecondsMetric + "_count":
			into, s.hasHist = &s.count, true
		default:
			continue
		}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				return s, fmt.Errorf("bench: metric line %q has no closing brace", line)
			}
			rest = rest[j+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return s, fmt.Errorf("bench: metric line %q has no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return s, fmt.Errorf("bench: metric line %q: %w", line, err)
		}
		*into += v
	}
	return s, sc.Err()
}

// scrapeFsync reads the fsync metrics from http://addr/metrics.
func scrapeFsync(ctx context.Context, c *http.Client, addr string) (fsyncSample, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	body, err := get(ctx, c, "http://"+addr+"/metrics")
	if err != nil {
		return fsyncSample{}, err
	}
	defer body.Close()
	return parseFsync(body)
}

// fetchProfile takes a CPU profile of d (whole seconds) from addr's
// /debug/pprof/profile.
func fetchProfile(ctx context.Context, c *http.Client, addr string, d time.Duration) (*profile.Profile, error) {
	secs := max(1, int(d/time.Second))
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+fetchTimeout)
	defer cancel()
	body, err := get(ctx, c, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		return nil, err
	}
	defer body.Close()
	p, err := profile.Parse(body)
	if err != nil {
		return nil, fmt.Errorf("parse profile from %s: %w", addr, err)
	}
	return p, nil
}

// get is the body of a 200 answer to GET url.
func get(ctx context.Context, c *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return resp.Body, nil
}
