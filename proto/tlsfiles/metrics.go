package tlsfiles

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts the loads of every Source of one process.
type Metrics struct {
	reloads *prometheus.CounterVec
}

// NewMetrics registers the collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sundial_tls_reloads_total",
		Help: "Loads of TLS certificate, key and CA files by files (their role: cluster, client) and result (ok; error: a bad file, the files loaded before are kept).",
	}, []string{"files", "result"})}
	reg.MustRegister(m.reloads)
	return m
}

func (m *Metrics) loaded(name string) {
	if m != nil {
		m.reloads.WithLabelValues(name, "ok").Inc()
	}
}

func (m *Metrics) failed(name string) {
	if m != nil {
		m.reloads.WithLabelValues(name, "error").Inc()
	}
}

// Reloads is the counter of files' loads with result, for tests.
func (m *Metrics) Reloads(files, result string) prometheus.Counter {
	return m.reloads.WithLabelValues(files, result)
}
