package operator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialmq/sundial/meta"
)

type metrics struct {
	operations  *prometheus.GaugeVec
	moveSeconds *prometheus.HistogramVec
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
	}
	// Every kind has a series from the start, so a dashboard shows 0
	// rather than no data before the first move.
	for _, k := range []meta.OperationKind{meta.OpKindMoveReplica, meta.OpKindAddReplica, meta.OpKindRemoveReplica, meta.OpKindTransferLeader,
		meta.OpKindDeleteTopic, meta.OpKindCreateGroup, meta.OpKindDeleteGroup, meta.OpKindSeedGroups, meta.OpKindCreateTopic} {
		m.moveSeconds.WithLabelValues(string(k))
	}
	if reg != nil {
		reg.MustRegister(m.operations, m.moveSeconds)
	}
	return m
}

// count sets the status gauges from st.
func (m *metrics) count(st *meta.State) {
	n := map[meta.OperationStatus]int{}
	for _, op := range st.Operations {
		n[op.Status]++
	}
	for _, s := range []meta.OperationStatus{meta.OperationPending, meta.OperationRunning, meta.OperationDone, meta.OperationFailed, meta.OperationRolledBack} {
		m.operations.WithLabelValues(string(s)).Set(float64(n[s]))
	}
}
