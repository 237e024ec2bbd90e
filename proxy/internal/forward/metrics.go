package forward

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the forwarding collectors of one proxy.
type Metrics struct {
	retries     *prometheus.CounterVec
	tryTimeouts prometheus.Counter
}

// NewMetrics registers the forwarding collectors with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		retries: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_proxy_forward_retries_total",
			Help: "Forwarded calls retried, by reason (not_leader, wrong_shard, unavailable, aborted, resource_exhausted, leader_moved).",
		}, []string{"reason"}),
		tryTimeouts: promauto.With(reg).NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_forward_try_timeouts_total",
			Help: "Reads forwarded to any broker whose attempt at one broker ran out of its per-try deadline, so the read moved on to the next broker (a hung broker).",
		}),
	}
}
