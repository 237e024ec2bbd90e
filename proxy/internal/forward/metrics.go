package forward

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the forwarding collectors of one proxy.
type Metrics struct {
	retries *prometheus.CounterVec
}

// NewMetrics registers the forwarding collectors with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		retries: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_proxy_forward_retries_total",
			Help: "Forwarded calls retried, by reason (not_leader, wrong_shard, unavailable, aborted, resource_exhausted).",
		}, []string{"reason"}),
	}
}
