// Package metrics_test holds Sundial's metrics to its STYLE rule: every
// metric a process serves is listed in docs/metrics.md and charted in
// deploy/grafana/dashboards/sundial.json, and every listed metric is served.
//
// TestDashboardChartsEveryDocumentedMetric reads the two files only.
// TestServedMetricsAreDocumented starts a broker and a proxy as processes
// (tests/framework), scrapes their /metrics over loopback and compares what
// they serve with the doc: names, types and label names. A labelled family
// has no series until its first event, so the doc's "appears" column says
// when each family is first served: "at start" (checked on a scrape right
// after the cluster is ready) or "after <event>" (checked after a workload
// that produces every such event, the last one a killed broker).
package metrics_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

const (
	docPath       = "docs/metrics.md"
	dashboardPath = "deploy/grafana/dashboards/sundial.json"
	atStart       = "at start"
)

// docRow is one metric row of a table in docs/metrics.md.
type docRow struct {
	name    string
	typ     string   // counter, gauge or histogram
	labels  []string // sorted
	appears string   // "at start" or "after <event>"
	line    int
}

func repoFile(t *testing.T, rel string) (string, []byte) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return rel, b
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readDoc parses the metric tables of docs/metrics.md: tables whose header
// has name, type, labels and appears columns.
func readDoc(t *testing.T) map[string]docRow {
	t.Helper()
	path, text := repoFile(t, docPath)
	rows := map[string]docRow{}
	var cols map[string]int // column index by header name; nil outside a metric table
	for i, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = nil
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if cols == nil {
			hdr := map[string]int{}
			for j, c := range cells {
				hdr[c] = j
			}
			if _, ok := hdr["name"]; ok {
				if _, ok := hdr["type"]; ok {
					for _, want := range []string{"labels", "appears"} {
						if _, ok := hdr[want]; !ok {
							t.Errorf("%s:%d: metric table has no %q column", path, i+1, want)
						}
					}
					cols = hdr
				}
			}
			continue
		}
		if strings.HasPrefix(cells[0], "---") || len(cells) < len(cols) {
			continue
		}
		m := backticked.FindStringSubmatch(cells[cols["name"]])
		if m == nil || !strings.HasPrefix(m[1], "sundial_") {
			t.Errorf("%s:%d: metric row without a `sundial_...` name: %s", path, i+1, line)
			continue
		}
		cell := func(col string) string {
			if j, ok := cols[col]; ok {
				return cells[j]
			}
			return "" // reported with the header
		}
		r := docRow{name: m[1], typ: cell("type"), appears: cell("appears"), line: i + 1}
		for _, l := range backticked.FindAllStringSubmatch(cell("labels"), -1) {
			r.labels = append(r.labels, l[1])
		}
		sort.Strings(r.labels)
		if prev, dup := rows[r.name]; dup {
			t.Errorf("%s:%d: %s is listed twice (also line %d)", path, i+1, r.name, prev.line)
		}
		if r.typ != "counter" && r.typ != "gauge" && r.typ != "histogram" {
			t.Errorf("%s:%d: %s has type %q, want counter, gauge or histogram", path, i+1, r.name, r.typ)
		}
		if _, ok := cols["appears"]; ok && r.appears != atStart && !strings.HasPrefix(r.appears, "after ") {
			t.Errorf("%s:%d: %s appears %q, want %q or \"after <event>\"", path, i+1, r.name, r.appears, atStart)
		}
		rows[r.name] = r
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no metric rows found", path)
	}
	return rows
}

// panel is the part of a Grafana panel this test reads.
type panel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Panels      []panel `json:"panels"` // of a collapsed row
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var promName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// readDashboard answers the sundial_* names used in the dashboard's target
// expressions, each with the title of a panel using it. It also checks
// that panel ids are unique and that every chart has a unit.
func readDashboard(t *testing.T) map[string]string {
	t.Helper()
	path, text := repoFile(t, dashboardPath)
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(text, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	used := map[string]string{}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("%s: panel id %d is used by %q and %q; give one a free id", path, p.ID, prev, p.Title)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: panel %d %q has no fieldConfig.defaults.unit", path, p.ID, p.Title)
			}
			for _, tg := range p.Targets {
				for _, n := range promName.FindAllString(tg.Expr, -1) {
					if strings.HasPrefix(n, "sundial_") {
						used[n] = p.Title
					}
				}
			}
		}
	}
	walk(d.Panels)
	return used
}

// familyOf maps a series name used in PromQL to the family documented for
// it: a histogram's _bucket, _sum and _count series belong to the histogram.
func familyOf(name string, doc map[string]docRow) (string, bool) {
	if _, ok := doc[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if r, ok := doc[base]; ok && r.typ == "histogram" {
				return base, true
			}
		}
	}
	return "", false
}

func TestDashboardChartsEveryDocumentedMetric(t *testing.T) {
	doc := readDoc(t)
	used := readDashboard(t)
	charted := map[string]bool{}
	for n, title := range used {
		f, ok := familyOf(n, doc)
		if !ok {
			t.Errorf("%s: panel %q queries %s, which %s does not list: fix the name or document the metric", dashboardPath, title, n, docPath)
			continue
		}
		charted[f] = true
	}
	for _, r := range sortedRows(doc) {
		if !charted[r.name] {
			t.Errorf("%s:%d lists %s (%s), but no expr in %s uses it: add a panel (rate() for a counter, histogram_quantile over _bucket for a histogram)",
				docPath, r.line, r.name, r.typ, dashboardPath)
		}
	}
}

func sortedRows(doc map[string]docRow) []docRow {
	rows := make([]docRow, 0, len(doc))
	for _, r := range doc {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	return rows
}

// served is what one scrape of every process found: each sundial_* family
// with the processes serving it.
type served struct {
	families map[string]*dto.MetricFamily // the first process's copy
	by       map[string][]string          // family → process names
}

// scrape scrapes every broker and proxy of c.
func scrape(t *testing.T, c *framework.Cluster) served {
	t.Helper()
	s := served{families: map[string]*dto.MetricFamily{}, by: map[string][]string{}}
	for _, b := range c.Brokers {
		s.add(b.Name, scrapeOne(t, b.Name, "http://"+b.MetricsAddr+"/metrics"))
	}
	for _, p := range c.Proxies {
		s.add(p.Name, scrapeOne(t, p.Name, "http://"+p.HTTPAddr+"/metrics"))
	}
	return s
}

func (s served) add(process string, fams map[string]*dto.MetricFamily) {
	for name, f := range fams {
		if !strings.HasPrefix(name, "sundial_") {
			continue
		}
		if _, ok := s.families[name]; !ok {
			s.families[name] = f
		}
		s.by[name] = append(s.by[name], process)
	}
}

func scrapeOne(t *testing.T, name, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s (%s): %v", name, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s (%s): %s", name, url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s (%s): %v", name, url, err)
	}
	return fams
}

// labelNames are the label names of f's series, sorted.
func labelNames(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// checkServed holds every served family to its doc row.
func checkServed(t *testing.T, when string, s served, doc map[string]docRow) {
	t.Helper()
	for name, f := range s.families {
		typ := strings.ToLower(f.GetType().String())
		r, ok := doc[name]
		if !ok {
			t.Errorf("%s: %s (%s, labels %v) is served by %v but %s does not list it: add a row to its subsystem's table, and a panel to %s",
				when, name, typ, labelNames(f), s.by[name], docPath, dashboardPath)
			continue
		}
		if r.typ != typ {
			t.Errorf("%s:%d: %s has type %s, but it is served as a %s by %v: fix the type column", docPath, r.line, name, r.typ, typ, s.by[name])
		}
		if got := labelNames(f); !slices.Equal(got, r.labels) {
			t.Errorf("%s:%d: %s has labels %v, but it is served with labels %v by %v: fix the labels column", docPath, r.line, name, r.labels, got, s.by[name])
		}
	}
}

func TestServedMetricsAreDocumented(t *testing.T) {
	doc := readDoc(t)
	// One group a minute per principal, so that rateLimited can be refused.
	c := framework.NewCluster(t, framework.Config{Brokers: 1, Proxies: 1, Shards: 2, ProxyArgs: []string{"--group-creates-per-minute", "1"}})

	start := scrape(t, c)
	checkServed(t, "at start", start, doc)
	for _, r := range sortedRows(doc) {
		if _, ok := start.families[r.name]; r.appears == atStart && !ok {
			t.Errorf("%s:%d: %s appears %q, but no process serves it right after start: fix the name, or say \"after <event>\" in the appears column",
				docPath, r.line, r.name, atStart)
		}
	}

	produceEvents(t, c)
	rateLimited(t, c)
	backedUp(t, c)
	after := scrape(t, c)
	proxy := c.Proxies[0]
	after.add(proxy.Name, forwardRetries(t, c))

	checkServed(t, "after the workload", after, doc)
	for _, r := range sortedRows(doc) {
		if strings.Contains(r.appears, "with TLS settings") {
			continue // this cluster is plaintext: tests/security checks these
		}
		if strings.Contains(r.appears, "with auth enabled") {
			continue // this cluster has no authentication: tests/integration's auth tests check these
		}
		if _, ok := after.families[r.name]; !ok {
			t.Errorf("%s:%d: %s (appears %s) is served by no process after a publish, a receive, an ack, a refused shard publish and a publish to a killed broker: fix the name, or make this test produce its event",
				docPath, r.line, r.name, r.appears)
		}
	}
}

// forwardRetries kills the broker and publishes through the proxy until it
// has retried a forward (each attempt meets a closed port: Unavailable),
// and answers the proxy's metrics then. The cluster has no broker after it.
func forwardRetries(t *testing.T, c *framework.Cluster) map[string]*dto.MetricFamily {
	t.Helper()
	if err := c.Kill(c.Brokers[0].ID); err != nil {
		t.Fatalf("Kill(broker %d) error = %v", c.Brokers[0].ID, err)
	}
	producer := sundialv1.NewProducerClient(dial(t, c.ProxyAddrs()[0]))
	proxy := c.Proxies[0]
	var fams map[string]*dto.MetricFamily
	framework.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := producer.Publish(ctx, &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{Topic: "metricsdoc", Payload: []byte("m")}}})
		if err == nil {
			return fmt.Errorf("publish with the broker killed succeeded")
		}
		fams = scrapeOne(t, proxy.Name, "http://"+proxy.HTTPAddr+"/metrics")
		if _, ok := fams["sundial_proxy_forward_retries_total"]; !ok {
			return fmt.Errorf("proxy has not retried a forward yet (publish error: %w)", err)
		}
		return nil
	})
	return fams
}

// rateLimited creates groups by Receiving on new ones until the proxy
// refuses one over the principal's quota (sundial_proxy_rate_limited_total).
// A Receive before the routing table lists the topic's groups is not
// counted, so it tries new names until the refusal.
func rateLimited(t *testing.T, c *framework.Cluster) {
	t.Helper()
	consumer := sundialv1.NewConsumerClient(dial(t, c.ProxyAddrs()[0]))
	n := 0
	framework.WaitFor(t, 60*time.Second, func() error {
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := consumer.Receive(ctx, &sundialv1.ReceiveRequest{Topic: "metricsdoc", Group: fmt.Sprintf("new-%d", n), MaxMessages: 1})
		if status.Code(err) == codes.ResourceExhausted {
			return nil
		}
		if err == nil {
			return fmt.Errorf("Receive on new group %d passed, not yet refused over the group quota", n)
		}
		return fmt.Errorf("Receive on new group %d, not yet refused over the group quota: %w", n, err)
	})
}

// produceEvents gives the labelled families their first series: a publish
// through the proxy to a topic nobody created (proxy requests and a topic
// lookup; the broker's meta reads for an unknown and a created topic), a
// Receive and an Ack of that message (settled receipts), and a shard
// publish without messages sent straight to the broker (a publish error),
// and an HTTP publish with a text/plain body (a proxy refusal).
func produceEvents(t *testing.T, c *framework.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	proxyConn := dial(t, c.ProxyAddrs()[0])
	const topic = "metricsdoc"
	pub, err := sundialv1.NewProducerClient(proxyConn).Publish(ctx, &sundialv1.PublishRequest{
		Messages: []*sundialv1.Message{{Topic: topic, Payload: []byte("m")}},
	})
	if err != nil {
		t.Fatalf("Publish(%s) error = %v", topic, err)
	}
	if e := pub.GetResults()[0].GetError(); e != nil {
		t.Fatalf("Publish(%s) result error = %v", topic, e)
	}

	consumer := sundialv1.NewConsumerClient(proxyConn)
	var receipt string
	framework.WaitFor(t, 60*time.Second, func() error {
		resp, err := consumer.Receive(ctx, &sundialv1.ReceiveRequest{Topic: topic, MaxMessages: 1, WaitMs: 2000})
		if err != nil {
			return err
		}
		if len(resp.GetDeliveries()) == 0 {
			return fmt.Errorf("no delivery of %s yet", topic)
		}
		receipt = resp.GetDeliveries()[0].GetReceipt()
		return nil
	})
	ack, err := consumer.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{receipt}})
	if err != nil {
		t.Fatalf("Ack() error = %v", err)
	}
	for _, r := range ack.GetResults() {
		if r.GetError() != nil {
			t.Fatalf("Ack() result error = %v", r.GetError())
		}
	}

	info, err := sundialv1.NewAdminClient(proxyConn).GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil {
		t.Fatalf("GetClusterInfo() error = %v", err)
	}
	shard := info.GetShards()[0].GetShardId()
	_, err = brokerv1.NewShardClient(dial(t, c.Brokers[0].GRPCAddr)).Publish(ctx, &brokerv1.ShardPublishRequest{ShardId: shard})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Shard.Publish(shard %d, no messages) error = %v, want InvalidArgument", shard, err)
	}

	// A plaintext cluster admits joins without a token, but checks one
	// that is given: a made-up token is refused (sundial_broker_refused_total).
	_, err = sundialv1.NewClusterClient(dial(t, c.Brokers[0].GRPCAddr)).JoinCluster(ctx, &sundialv1.JoinClusterRequest{
		RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Incarnation: "metricsdoc", JoinToken: "sdjt.0123456789abcdef.guess",
	})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("JoinCluster(a made-up token) error = %v, want PermissionDenied", err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.Proxies[0].HTTPAddr+"/v1/topics/"+topic+"/messages", strings.NewReader(`{"messages":[{"text":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST text/plain: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("POST text/plain = %d, want 415", resp.StatusCode)
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// backedUp takes a backup with wait, so the meta leader serves the gauges
// of its destination's last success.
func backedUp(t *testing.T, c *framework.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := sundialv1.NewBackupsClient(dial(t, c.ProxyAddrs()[0])).CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: "file://" + t.TempDir(), Wait: true})
	if err != nil || run.GetStatus() != sundialv1.BackupStatus_BACKUP_STATUS_DONE {
		t.Fatalf("CreateBackup = %v, %v; want done", run, err)
	}
	// The meta leader sets the gauges on its next look at the runs.
	framework.WaitFor(t, 30*time.Second, func() error {
		if _, ok := scrape(t, c).families["sundial_backup_last_success_timestamp_seconds"]; !ok {
			return fmt.Errorf("no last-success gauge yet")
		}
		return nil
	})
}
