package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the dispatchers' collectors, shared by every shard of a broker.
type Metrics struct {
	consumers   prometheus.Gauge
	deliveries  prometheus.Counter
	redelivered prometheus.Counter
	lateness    prometheus.Histogram
	// leaseConflicts counts copies pushed whose lease did not commit as
	// picked (acked, nacked or leased meanwhile): possible duplicates.
	leaseConflicts prometheus.Counter
	// heldPastFailedLease counts copies pushed before a lease proposal
	// that then failed, held back from other consumers until the deadline
	// their consumer was given.
	heldPastFailedLease prometheus.Counter
	deadLettered        prometheus.Counter
	expired             prometheus.Counter
	// barrierWait is how long new leaders waited to apply the previous
	// term's entries before their first round.
	barrierWait         prometheus.Histogram
	leaseRenewalsFailed prometheus.Counter
	// pushedAfterCommit counts at-least-once deliveries held back until
	// their lease committed because the leader lease had lapsed.
	pushedAfterCommit prometheus.Counter
	consumerFull      prometheus.Counter
	// fairRebuilds counts FAIR queue partitions whose active fairness
	// keys were rebuilt from the fair index.
	fairRebuilds prometheus.Counter
	// rounds counts delivery rounds (each scans the due index of every
	// queue with credit): the dispatchers' wake-ups.
	rounds prometheus.Counter
}

// NewMetrics registers the dispatch collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		consumers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "subscriptions",
			Help: "Subscribe streams attached to shards this broker leads.",
		}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "delivered_messages_total",
			Help: "Deliveries pushed to consumers (every attempt).",
		}),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "redelivered_messages_total",
			Help: "Deliveries of attempt 2 or later (lease expired or nacked).",
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "delivery_lateness_seconds",
			Help:    "First delivery time minus due time, at the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	m.leaseConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "lease_conflicts_total",
		Help: "Deliveries pushed whose lease then did not commit as picked (a possible duplicate).",
	})
	m.heldPastFailedLease = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "deliveries_held_past_failed_lease_total",
		Help: "Deliveries pushed before their lease committed whose lease proposal then failed; each copy is held from other consumers until the deadline its consumer was given.",
	})
	m.deadLettered = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "dead_lettered_messages_total",
		Help: "Copies moved to their topic's dead-letter topic after max attempts.",
	})
	m.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "expired_messages_total",
		Help: "Messages removed by the TTL sweep, never delivered.",
	})
	m.barrierWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "leader_barrier_wait_seconds",
		Help:    "Time a new shard leader waited for its read barrier (previous term applied) before dispatching.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.leaseRenewalsFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "leader_lease_renewals_failed_total",
		Help: "Leader lease renewals (ReadIndex) that did not pass; deliveries then wait for their lease to commit.",
	})
	m.pushedAfterCommit = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "deliveries_after_lease_commit_total",
		Help: "At-least-once deliveries held until their lease committed because the leader lease had lapsed or a change was pending.",
	})
	m.consumerFull = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "consumer_buffer_full_total",
		Help: "Rounds that skipped a consumer with credit because its deliveries on the broker (picked or buffered, not yet sent) reached the per-consumer cap.",
	})
	m.fairRebuilds = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "fair_rebuilds_total",
		Help: "FAIR queue partitions whose fairness keys with due messages were rebuilt from the fair index (a new leader's first round, a reset, or more due at once than a round catches up on).",
	})
	m.rounds = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sundial", Subsystem: "broker", Name: "dispatch_rounds_total",
		Help: "Delivery rounds run by the shard leaders' dispatchers (each scans the due index of every queue with credit).",
	})
	reg.MustRegister(m.consumers, m.deliveries, m.redelivered, m.lateness, m.leaseConflicts, m.heldPastFailedLease, m.deadLettered, m.expired,
		m.barrierWait, m.leaseRenewalsFailed, m.pushedAfterCommit, m.consumerFull, m.fairRebuilds, m.rounds)
	return m
}

func (m *Metrics) delivered(now time.Time, dueMs int64, attempt uint32) {
	m.deliveries.Inc()
	if attempt > 1 {
		m.redelivered.Inc()
		return
	}
	m.lateness.Observe(max(now.Sub(time.UnixMilli(dueMs)).Seconds(), 0))
}
