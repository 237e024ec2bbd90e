// Package ui is the proxy's admin UI, served under /ui/ on the proxy's
// HTTP port: server-rendered html/template pages (Cluster with its
// Backups section: schedule, runs, back up now; Topics; Topic detail with
// its due-time chart, message browser, settings and actions),
// a small CSS file and htmx 2 (vendored from the npm package htmx.org,
// license 0BSD, see static/htmx.LICENSE), all embedded with go:embed.
//
// Every read and action goes through API, the proxy's own public gRPC
// API (in the proxy a loopback client of its own listener), so the UI
// sees exactly what a gRPC client sees: the same validation, routing,
// fan-out and error statuses. There is no second path to the brokers.
//
// Invariants:
//   - The read-only pages work without JavaScript; htmx only refreshes
//     parts of them (every RefreshInterval) and boosts links and forms.
//   - Actions are POSTs behind http.CrossOriginProtection (Sec-Fetch-Site
//     or Origin must name this origin); destructive ones (cancel, purge,
//     clearing the backup schedule, a schedule whose keep deletes old
//     backups) answer a confirmation page first, which works without
//     JavaScript. Restore is not offered: it is shardctl's, into a new
//     cluster.
//   - An API error is shown in the page with its gRPC code, message and
//     field violations, under the HTTP status the code maps to; the UI
//     never answers a blank page.
//   - Everything the user or the API supplies is escaped by html/template.
//
// Handler is safe for concurrent use: it holds no mutable state; each
// request runs on its net/http goroutine, and the topics page's GetTopic
// calls on at most statsConcurrency goroutines it joins before rendering.
// Each action is logged (action, its topic if any, remote_addr, outcome
// or error).
package ui
