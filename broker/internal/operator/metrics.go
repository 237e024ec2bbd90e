package operator

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialmq/sundial/meta"
)

type metrics struct {
	operations  *prometheus.GaugeVec
	moveSeconds *prometheus.HistogramVec
	timeouts    *prometheus.CounterVec // by step kind
	skipped     prometheus.Gauge
	cancelled   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		operations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "operator", Name: "operations",
			Help: "Cluster operations in the meta state by status (pending, running, done, failed, rolled-back); set by the executor on the meta leader.",
		}, []string{"status"}),
		moveSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "operator", Name: "operation_duration_seconds",
			Help:    "Time from start to done of the operations this executor finished, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
		}, []string{"kind"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "operator", Name: "step_timeouts_total",
			Help: "Operation steps this executor ran that passed their timeout, by step kind; the step then follows its rollback rule (a delete-data is skipped).",
		}, []string{"step"}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "operator", Name: "skipped_steps",
			Help: "Operation steps in the meta state recorded as skipped (a delete-data whose node is dead, removed or did not report, or that a cancel skipped); set by the executor on the meta leader.",
		}),
		cancelled: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "operator", Name: "cancelled_operations",
			Help: "Operations in the meta state an operator cancelled (shardctl operations cancel), finished or rolling back; set by the executor on the meta leader.",
		}),
	}
	// Every kind has a series from the start, so a dashboard shows 0
	// rather than no data before the first move.
	for _, k := range []meta.OperationKind{meta.OpKindMoveReplica, meta.OpKindAddReplica, meta.OpKindRemoveReplica, meta.OpKindTransferLeader,
		meta.OpKindDeleteTopic, meta.OpKindCreateGroup, meta.OpKindDeleteGroup, meta.OpKindSeedGroups, meta.OpKindCreateTopic} {
		m.moveSeconds.WithLabelValues(string(k))
	}
	for _, k := range []meta.StepKind{meta.StepAddLearner, meta.StepWaitCatchUp, meta.StepPromote, meta.StepTransferLeader, meta.StepRemoveReplica, meta.StepDeleteData} {
		m.timeouts.WithLabelValues(string(k))
	}
	if reg != nil {
		reg.MustRegister(m.operations, m.moveSeconds, m.timeouts, m.skipped, m.cancelled)
	}
	return m
}

// count sets the status gauges from st.
func (m *metrics) count(st *meta.State) {
	n := map[meta.OperationStatus]int{}
	var skipped, cancelled int
	for _, op := range st.Operations {
		n[op.Status]++
		if op.Cancel != "" {
			cancelled++
		}
		for _, s := range op.Steps {
			if strings.HasPrefix(s.Outcome, "skipped") {
				skipped++
			}
		}
	}
	m.skipped.Set(float64(skipped))
	m.cancelled.Set(float64(cancelled))
	for _, s := range []meta.OperationStatus{meta.OperationPending, meta.OperationRunning, meta.OperationDone, meta.OperationFailed, meta.OperationRolledBack} {
		m.operations.WithLabelValues(string(s)).Set(float64(n[s]))
	}
}
