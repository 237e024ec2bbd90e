package routing

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the routing collectors of one proxy.
type Metrics struct {
	version    prometheus.Gauge
	reconnects prometheus.Counter
	broker     *prometheus.GaugeVec // by broker_addr: 1 on the broker the watch follows
}

// NewMetrics registers the routing collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		version: f.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_proxy_routing_version",
			Help: "Version of the routing table the proxy routes with.",
		}),
		reconnects: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_routing_watch_reconnects_total",
			Help: "Routing watch streams that ended and were reopened.",
		}),
		broker: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sundial_proxy_routing_watch_broker",
			Help: "1 for the broker (broker_addr) whose routing watch stream the proxy has open; no series while none is open.",
		}, []string{"broker_addr"}),
	}
}

// m returns m, or unregistered collectors when m is nil (tests).
func (m *Metrics) m() *Metrics {
	if m == nil {
		return NewMetrics(nil)
	}
	return m
}
