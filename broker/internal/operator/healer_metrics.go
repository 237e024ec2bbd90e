package operator

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialmq/sundial/meta"
)

// healerMetrics are the healer's collectors. The gauges are set on the
// meta leader only; a broker that stops leading meta clears them.
type healerMetrics struct {
	nodes        *prometheus.GaugeVec
	lastSeen     *prometheus.GaugeVec
	deadReplicas prometheus.Gauge
	suspects     prometheus.Gauge
	declared     *prometheus.CounterVec
	repairs      prometheus.Counter
	noTarget     prometheus.Counter
}

var nodeStates = []meta.NodeState{meta.NodeActive, meta.NodeDraining, meta.NodeDead, meta.NodeRemoved}

func newHealerMetrics(reg prometheus.Registerer) *healerMetrics {
	m := &healerMetrics{
		nodes:        prometheus.NewGaugeVec(gaugeOpts("nodes", "Registered nodes by state (active, draining, dead, removed); set by the healer on the meta leader, 0 on the other brokers."), []string{"state"}),
		lastSeen:     prometheus.NewGaugeVec(gaugeOpts("node_last_seen_seconds", "Seconds since the meta leader's healer last had an answer from the node (counted from when it began leading if none yet); 0 for the meta leader itself."), []string{"node_id"}),
		deadReplicas: prometheus.NewGauge(gaugeOpts("dead_replicas", "Replicas placed on nodes declared dead or removed with force, still to be repaired; set by the healer on the meta leader.")),
		suspects:     prometheus.NewGauge(gaugeOpts("suspect_nodes", "Nodes the meta leader's healer has not heard from for suspect_after, not declared dead: plans move no replica or leadership onto or off them.")),
		declared:     prometheus.NewCounterVec(counterOpts("node_declarations_total", "Nodes this broker's healer declared dead or alive again, by verdict."), []string{"verdict"}),
		repairs:      prometheus.NewCounter(counterOpts("repairs_submitted_total", "Repair operations (a replica of a dead node re-created on a live one) this broker's healer submitted.")),
		noTarget:     prometheus.NewCounter(counterOpts("repairs_without_target_total", "Times a shard with a replica on a dead node found no live node to take a replica; the repair is planned again later.")),
	}
	for _, v := range []string{"dead", "alive"} {
		m.declared.WithLabelValues(v)
	}
	for _, st := range nodeStates {
		m.nodes.WithLabelValues(string(st)) // 0 until this broker leads meta
	}
	if reg != nil {
		reg.MustRegister(m.nodes, m.lastSeen, m.deadReplicas, m.suspects, m.declared, m.repairs, m.noTarget)
	}
	return m
}

// observe sets the node gauges from st and the liveness clocks at now.
func (m *healerMetrics) observe(st *meta.State, l *liveness, self meta.NodeID, now time.Time) {
	count := map[meta.NodeState]int{}
	m.lastSeen.Reset()
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		count[n.State]++
		if n.State == meta.NodeRemoved {
			continue
		}
		since := now.Sub(l.lastSeen(id)).Seconds()
		if id == self {
			since = 0
		}
		m.lastSeen.WithLabelValues(strconv.FormatUint(uint64(id), 10)).Set(since)
	}
	for _, s := range nodeStates {
		m.nodes.WithLabelValues(string(s)).Set(float64(count[s]))
	}
}

// reset zeroes the gauges only the meta leader sets.
func (m *healerMetrics) reset() {
	for _, st := range nodeStates {
		m.nodes.WithLabelValues(string(st)).Set(0)
	}
	m.lastSeen.Reset()
	m.deadReplicas.Set(0)
	m.suspects.Set(0)
}

// gaugeOpts and counterOpts name the collector sundial_operator_<name>.
func gaugeOpts(name, help string) prometheus.GaugeOpts {
	return prometheus.GaugeOpts{Namespace: "sundial", Subsystem: "operator", Name: name, Help: help}
}

func counterOpts(name, help string) prometheus.CounterOpts {
	return prometheus.CounterOpts(gaugeOpts(name, help))
}
