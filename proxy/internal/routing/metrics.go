package routing

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the routing collectors of one proxy.
type Metrics struct {
	version  prometheus.Gauge
	restarts *prometheus.CounterVec // by reason: silent, ended, error
	broker   *prometheus.GaugeVec   // by broker_addr: 1 on the broker the watch follows
	// sinceFrame answers the silence gauge; the Watcher sets it.
	sinceFrame atomic.Pointer[func() float64]
}

// NewMetrics registers the routing collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		version: f.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_proxy_routing_version",
			Help: "Version of the routing table the proxy routes with.",
		}),
		restarts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_proxy_routing_watch_restarts_total",
			Help: "Routing watch streams that ended and were reopened on a broker, by reason: silent (no frame within the silence bound: a frozen or cut-off broker), ended (the broker closed it), error (connection lost, refused, keepalive).",
		}, []string{"reason"}),
		broker: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_proxy_routing_watch_broker",
			Help: "1 for the broker (broker_addr) whose routing watch stream the proxy has open; no series while none is open.",
		}, []string{"broker_addr"}),
	}
	for _, r := range []string{reasonSilent, reasonEnded, reasonError} {
		m.restarts.WithLabelValues(r)
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sundial_proxy_routing_watch_silence_seconds",
		Help: "Seconds since the routing watch last heard a frame (a table or a progress frame) from a broker; 0 before the first. Above the silence bound (watch_silence_timeout, default 2 s) the watch moves to another broker and /readyz says not ready.",
	}, func() float64 {
		if f := m.sinceFrame.Load(); f != nil {
			return (*f)()
		}
		return 0
	})
	return m
}

// m returns m, or unregistered collectors when m is nil (tests).
func (m *Metrics) m() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
