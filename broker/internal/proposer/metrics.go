package proposer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proposer's collectors, shared by every shard of a broker.
type Metrics struct {
	latency  prometheus.Histogram
	commands prometheus.Histogram
	failures prometheus.Counter
}

// NewMetrics registers the proposer's collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "raft", Name: "proposal_latency_seconds",
			Help:    "Time from proposing an event-shard entry to its commit and apply.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		commands: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "raft", Name: "proposal_batch_commands",
			Help:    "Commands group-committed in one event-shard entry.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "raft", Name: "proposal_failures_total",
			Help: "Event-shard proposals that failed (timeout, not ready, closed).",
		}),
	}
	reg.MustRegister(m.latency, m.commands, m.failures)
	return m
}

func (m *Metrics) observe(d time.Duration, commands int, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.failures.Inc()
		return
	}
	m.latency.Observe(d.Seconds())
	m.commands.Observe(float64(commands))
}
