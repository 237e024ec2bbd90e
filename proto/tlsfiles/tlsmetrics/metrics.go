// Package tlsmetrics counts the loads of tlsfiles Sources in Prometheus
// (apart from tlsfiles, so that clients of the SDK need no Prometheus).
package tlsmetrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the loads of every Source of one process; it is a
// tlsfiles.Counter.
type Metrics struct {
	reloads *prometheus.CounterVec
}

// New registers the collectors on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sundial_tls_reloads_total",
		Help: "Loads of TLS certificate, key and CA files by files (their role: cluster, client) and result (ok; error: a bad file, the files loaded before are kept).",
	}, []string{"files", "result"})}
	reg.MustRegister(m.reloads)
	return m
}

// Loaded counts a successful load of files.
func (m *Metrics) Loaded(files string) { m.reloads.WithLabelValues(files, "ok").Inc() }

// Failed counts a failed load of files.
func (m *Metrics) Failed(files string) { m.reloads.WithLabelValues(files, "error").Inc() }

// Reloads is the counter of files' loads with result, for tests.
func (m *Metrics) Reloads(files, result string) prometheus.Counter {
	return m.reloads.WithLabelValues(files, result)
}
