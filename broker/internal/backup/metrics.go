package backup

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a broker's backup metrics: its shard captures and uploads,
// the runs its executor finished while it led the meta group, and the
// restores it coordinated. The dest label is a destination's URL without
// secrets; a cluster writes to few destinations.
type Metrics struct {
	captures       *prometheus.CounterVec // by kind
	captureBytes   prometheus.Counter
	captureSeconds prometheus.Histogram
	retries        *prometheus.CounterVec // by op
	runs           *prometheus.CounterVec // by kind, result
	lastSuccess    *prometheus.GaugeVec   // by dest
	runSeconds     *prometheus.GaugeVec   // by dest
	runBytes       *prometheus.GaugeVec   // by dest
	restores       *prometheus.CounterVec // by result
	restoredBytes  prometheus.Counter
}

// NewMetrics registers the backup metrics with reg (none when nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		captures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "shard_captures_total",
			Help: "Shard captures this broker wrote and uploaded for backups, by kind (full, incremental).",
		}, []string{"kind"}),
		captureBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "capture_bytes_total",
			Help: "Bytes of the shard capture files this broker uploaded.",
		}),
		captureSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "capture_duration_seconds",
			Help:    "Time one shard capture took on this broker, from the journal proposal to the end of the upload.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "destination_retries_total",
			Help: "Calls to a backup destination that failed and were tried again, by operation (put, open, list, delete).",
		}, []string{"op"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "runs_total",
			Help: "Backup runs this broker's executor finished while it led the meta group, by kind and result (done, failed).",
		}, []string{"kind", "result"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "last_success_timestamp_seconds",
			Help: "Unix time the newest backup run to a destination finished done, as the meta leader knows it (every broker leading the meta group sets it from the kept runs).",
		}, []string{"dest"}),
		runSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "last_duration_seconds",
			Help: "Duration of the newest backup run to a destination that finished done.",
		}, []string{"dest"}),
		runBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "last_bytes",
			Help: "Bytes written by the newest backup run to a destination that finished done.",
		}, []string{"dest"}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "restores_total",
			Help: "Restores this broker coordinated, by result (done, failed).",
		}, []string{"result"}),
		restoredBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "backup", Name: "restored_bytes_total",
			Help: "Bytes of backup files this broker restored into shards.",
		}),
	}
	for _, k := range []string{"full", "incremental"} {
		m.captures.WithLabelValues(k)
		for _, r := range []string{"done", "failed"} {
			m.runs.WithLabelValues(k, r)
		}
	}
	for _, r := range []string{"done", "failed"} {
		m.restores.WithLabelValues(r)
	}
	for _, op := range []string{"put", "open", "list", "delete"} {
		m.retries.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.captures, m.captureBytes, m.captureSeconds, m.retries, m.runs, m.lastSuccess, m.runSeconds, m.runBytes, m.restores, m.restoredBytes)
	}
	return m
}

func (m *Metrics) captured(kind string, bytes int64, d time.Duration) {
	m.captures.WithLabelValues(kind).Inc()
	m.captureBytes.Add(float64(bytes))
	m.captureSeconds.Observe(d.Seconds())
}

func (m *Metrics) retried(op string) { m.retries.WithLabelValues(op).Inc() }

// RunEnded counts a run the executor finished.
func (m *Metrics) RunEnded(kind string, ok bool) {
	result := "done"
	if !ok {
		result = "failed"
	}
	m.runs.WithLabelValues(kind, result).Inc()
}

// LastSuccess sets the gauges of dest's newest done run.
func (m *Metrics) LastSuccess(dest string, finished time.Time, d time.Duration, bytes int64) {
	m.lastSuccess.WithLabelValues(dest).Set(float64(finished.UnixMilli()) / 1000)
	m.runSeconds.WithLabelValues(dest).Set(d.Seconds())
	m.runBytes.WithLabelValues(dest).Set(float64(bytes))
}

func (m *Metrics) restored(ok bool, bytes int64) {
	result := "done"
	if !ok {
		result = "failed"
	}
	m.restores.WithLabelValues(result).Inc()
	m.restoredBytes.Add(float64(bytes))
}
