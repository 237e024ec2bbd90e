package ui

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// maxTopicsListed caps the topics page; a prefix narrows it.
const maxTopicsListed = 200

// statsConcurrency bounds the GetTopic calls the topics page runs at once.
const statsConcurrency = 8

// clusterView is the Cluster page.
type clusterView struct {
	Info         *sundialv1.ClusterInfo
	Nodes        []nodeRow
	Shards       []shardRow
	Operations   []*sundialv1.Operation
	OperationErr *apiError // ListOperations may fail on its own
	Backups      *backupsView
}

type nodeRow struct {
	Node     *sundialv1.Node
	Replicas int
	Leaders  int
	IsMeta   bool   // the meta leader
	LastSeen string // when the meta leader last heard from it, "3s ago"; "-" unknown
	Unheard  string // "suspect" or "unreachable" when it has not lately; "" else
}

type shardRow struct {
	Shard    *sundialv1.Shard
	Replicas []string // "node 2 (replica 5)"
}

func (h *Handler) clusterPage(w http.ResponseWriter, r *http.Request) {
	h.showCluster(w, r, r.URL.Query().Get("notice"), nil)
}

// showCluster renders the Cluster page with a notice or the error of an
// action (which sets the HTTP status).
func (h *Handler) showCluster(w http.ResponseWriter, r *http.Request, notice string, actionErr *apiError) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	p := &page{Title: "Cluster", Nav: "cluster", Notice: notice, Err: actionErr, Self: "/ui/cluster"}
	code := http.StatusOK
	if actionErr != nil {
		code = actionErr.HTTPStatus
	}
	info, err := h.api.Admin.GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil {
		if p.Err == nil {
			p.Err = toAPIError(err)
			code = p.Err.HTTPStatus
		}
		h.render(w, r, code, "cluster", p)
		return
	}
	v := &clusterView{Info: info}
	replicas, leaders := map[uint64]int{}, map[uint64]int{}
	for _, s := range info.GetShards() {
		row := shardRow{Shard: s}
		for _, rep := range s.GetReplicas() {
			replicas[rep.GetNodeId()]++
			row.Replicas = append(row.Replicas, "node "+strconv.FormatUint(rep.GetNodeId(), 10)+" (replica "+strconv.FormatUint(rep.GetReplicaId(), 10)+")")
		}
		if s.GetLeaderNodeId() != 0 {
			leaders[s.GetLeaderNodeId()]++
		}
		v.Shards = append(v.Shards, row)
	}
	for _, n := range info.GetNodes() {
		id := n.GetNodeId()
		row := nodeRow{Node: n, Replicas: replicas[id], Leaders: leaders[id], IsMeta: id == info.GetMetaLeaderNodeId(), LastSeen: "-"}
		if ms := n.GetLastSeenUnixMs(); ms != 0 {
			row.LastSeen = ago(ms, h.now())
		}
		switch {
		case n.GetState() == sundialv1.NodeState_NODE_STATE_DEAD:
		case n.GetSuspect():
			row.Unheard = "suspect"
		case n.GetUnreachable():
			row.Unheard = "unreachable"
		}
		v.Nodes = append(v.Nodes, row)
	}
	ops, err := h.api.Cluster.ListOperations(ctx, &sundialv1.ListOperationsRequest{UnfinishedOnly: true})
	if err != nil {
		v.OperationErr = toAPIError(err)
	} else {
		v.Operations = ops.GetOperations()
	}
	v.Backups = h.backupsOf(ctx, r)
	p.Data = v
	h.render(w, r, code, "cluster", p)
}

// topicsView is the Topics page: one row per (topic, group).
type topicsView struct {
	Prefix    string
	Rows      []topicRow
	Truncated bool
}

type topicRow struct {
	Topic     *sundialv1.Topic
	Group     string
	Stats     *sundialv1.GroupStats // nil when Err is set
	Err       *apiError
	FirstOfIt bool // the first row of its topic
	GroupRows int  // rows of the topic, on its first row
}

func (h *Handler) topicsPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	prefix := r.URL.Query().Get("prefix")
	p := &page{Title: "Topics", Nav: "topics", Notice: r.URL.Query().Get("notice"), Self: "/ui/topics?" + url.Values{"prefix": {prefix}}.Encode()}
	v := &topicsView{Prefix: prefix}
	p.Data = v
	list, err := h.api.Admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{Prefix: prefix, PageSize: maxTopicsListed})
	if err != nil {
		p.Err, p.Data = toAPIError(err), nil
		h.render(w, r, p.Err.HTTPStatus, "topics", p)
		return
	}
	v.Truncated = list.GetNextPageToken() != ""
	// ListTopics carries no stats; GetTopic fans out for them, a few
	// topics at a time.
	topics := list.GetTopics()
	full := make([]*sundialv1.Topic, len(topics))
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	sem := make(chan struct{}, statsConcurrency)
	for i, t := range topics {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			full[i], errs[i] = h.api.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: t.GetName()})
		})
	}
	wg.Wait()
	for i, t := range topics {
		if errs[i] != nil {
			v.Rows = append(v.Rows, topicRow{Topic: t, Err: toAPIError(errs[i]), FirstOfIt: true, GroupRows: 1})
			continue
		}
		stats := full[i].GetStats()
		if len(stats) == 0 {
			v.Rows = append(v.Rows, topicRow{Topic: full[i], FirstOfIt: true, GroupRows: 1})
			continue
		}
		for j, s := range stats {
			v.Rows = append(v.Rows, topicRow{Topic: full[i], Group: s.GetGroup(), Stats: s, FirstOfIt: j == 0, GroupRows: len(stats)})
		}
	}
	h.render(w, r, http.StatusOK, "topics", p)
}

// topicView is the Topic detail page.
type topicView struct {
	Topic   *sundialv1.Topic
	Groups  []*sundialv1.GroupStats
	Chart   *chart
	ChartOf string // the range shown: minute, hour, day or week
	Ranges  []string
	ChartEr *apiError

	Filter   messageFilter
	Messages []messageRow
	NextPage string // the query of the next page, "" on the last
	ListErr  *apiError

	Settings []setting
}

// messageFilter is the message browser's form, echoed back into it.
type messageFilter struct {
	Group, From, To, KeyPrefix, HeaderKey, HeaderValue, View, PageToken string
}

func (f messageFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{
		"group": f.Group, "from": f.From, "to": f.To, "key_prefix": f.KeyPrefix,
		"header_key": f.HeaderKey, "header_value": f.HeaderValue, "view": f.View,
	} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// pageQuery is the Topic page query of filter f with chart range r.
func pageQuery(f messageFilter, r string) string {
	q := f.query()
	q.Set("range", r)
	return q.Encode()
}

type messageRow struct {
	Info    *sundialv1.MessageInfo
	Payload payloadView
	Headers []header
}

type header struct{ Key, Value string }

func (h *Handler) topicPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	h.showTopic(w, r, q, q.Get("notice"), nil)
}

// showTopic renders the Topic detail page of the path's topic, for the
// page query q (chart range, message filter), with a notice or the error
// of an action (which sets the HTTP status).
func (h *Handler) showTopic(w http.ResponseWriter, r *http.Request, q url.Values, notice string, actionErr *apiError) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	name := r.PathValue("topic")
	code := http.StatusOK
	p := &page{Title: "Topic " + name, Nav: "topics", Notice: notice, Err: actionErr, Self: "/ui/topics/" + url.PathEscape(name)}
	if actionErr != nil {
		code = actionErr.HTTPStatus
	}
	t, err := h.api.Admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: name})
	if err != nil {
		if p.Err == nil {
			p.Err = toAPIError(err)
			code = p.Err.HTTPStatus
		}
		h.render(w, r, code, "error", p)
		return
	}
	v := &topicView{Topic: t, Groups: t.GetStats(), Ranges: chartRanges, Settings: settingsOf(t)}
	p.Data = v

	v.Filter = messageFilter{
		Group: q.Get("group"), From: q.Get("from"), To: q.Get("to"), KeyPrefix: q.Get("key_prefix"),
		HeaderKey: q.Get("header_key"), HeaderValue: q.Get("header_value"), View: q.Get("view"), PageToken: q.Get("page_token"),
	}
	if v.Filter.View == "" {
		v.Filter.View = "text"
	}
	v.ChartOf = q.Get("range")
	if _, ok := chartSpans[v.ChartOf]; !ok {
		v.ChartOf = "hour"
	}
	p.Self += "?" + pageQuery(v.Filter, v.ChartOf)
	now := h.now()
	req := histogramRequest(name, q.Get("group"), v.ChartOf, now)
	if hist, err := h.api.Admin.DueHistogram(ctx, req); err != nil {
		v.ChartEr = toAPIError(err)
	} else {
		v.Chart = buildChart(req, hist.GetCounts())
	}

	if liveRefresh(r) {
		// htmx keeps only #live (counts and chart): skip the message scan.
		h.render(w, r, code, "topic", p)
		return
	}
	lreq := &sundialv1.ListMessagesRequest{
		Topic: name, Group: v.Filter.Group, KeyPrefix: v.Filter.KeyPrefix,
		HeaderKey: v.Filter.HeaderKey, HeaderValue: v.Filter.HeaderValue, PageSize: 50, PageToken: v.Filter.PageToken,
	}
	var perr *apiError
	if lreq.FromUnixMs, perr = parseWhen("from", v.Filter.From, now); perr == nil {
		lreq.ToUnixMs, perr = parseWhen("to", v.Filter.To, now)
	}
	if perr != nil {
		v.ListErr = perr
	} else if list, err := h.api.Admin.ListMessages(ctx, lreq); err != nil {
		v.ListErr = toAPIError(err)
	} else {
		for _, m := range list.GetMessages() {
			v.Messages = append(v.Messages, messageRow{Info: m, Payload: viewPayload(m.GetPayload(), v.Filter.View), Headers: sortedHeaders(m.GetHeaders())})
		}
		if tok := list.GetNextPageToken(); tok != "" {
			nq := v.Filter.query()
			nq.Set("page_token", tok)
			v.NextPage = nq.Encode()
		}
	}
	h.render(w, r, code, "topic", p)
}

// liveRefresh reports whether r is htmx's periodic reload of a page's
// live part, which renders only what that part shows.
func liveRefresh(r *http.Request) bool {
	return r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Target") == "live"
}

func sortedHeaders(m map[string]string) []header {
	out := make([]header, 0, len(m))
	for k, v := range m {
		out = append(out, header{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// parseWhen reads a due-range bound of the message browser: empty (no
// bound), a duration from now ("10m", "-1h", "+2h30m") or an RFC 3339
// time ("2026-12-01T10:00:00Z").
func parseWhen(field, s string, now time.Time) (int64, *apiError) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "+")); err == nil {
		return now.Add(d).UnixMilli(), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UnixMilli(), nil
	}
	return 0, badInput(field, "want a duration from now (10m, -1h) or an RFC 3339 time, got "+strconv.Quote(s))
}
