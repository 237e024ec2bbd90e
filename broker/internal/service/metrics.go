package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Metrics are the service's collectors.
type Metrics struct {
	publishedMsgs  prometheus.Counter
	publishLatency prometheus.Histogram
	publishErrors  *prometheus.CounterVec
	receipts       *prometheus.CounterVec
	acked          prometheus.Counter
	metaReads      *prometheus.CounterVec
	misplaced      prometheus.Counter
	topicCreates   prometheus.Counter
}

// NewMetrics registers the service collectors on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		publishedMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "published_messages_total",
			Help: "Messages committed by publish requests this broker led.",
		}),
		publishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "publish_latency_seconds",
			Help:    "Time to commit one shard publish request, at the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "publish_errors_total",
			Help: "Shard publish requests that failed, by gRPC code.",
		}, []string{"code"}),
		acked: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "acked_messages_total",
			Help: "Deliveries completed by an ack.",
		}),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "settled_receipts_total",
			Help: "Receipts answered by ack, nack and extend, by operation and result code.",
		}, []string{"op", "code"}),
		metaReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "publish_meta_reads_total",
			Help: "Linearizable meta reads a shard publish or keyed cancel/reschedule needed because the cached meta state was not enough, by reason.",
		}, []string{"reason"}),
		misplaced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "publish_misplaced_total",
			Help: "Shard publishes and keyed cancels/reschedules refused (WrongShard) because a message's topic partition does not live on the shard.",
		}),
		topicCreates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sundial", Subsystem: "broker", Name: "publish_topic_creates_total",
			Help: "Meta proposals shard publishes made to create a topic the broker did not know (automatic topic creation): one per new topic of a request, however many of its messages name it.",
		}),
	}
	reg.MustRegister(m.publishedMsgs, m.publishLatency, m.publishErrors, m.receipts, m.acked, m.metaReads, m.misplaced, m.topicCreates)
	return m
}

func (m *Metrics) published(n int, d time.Duration, err error) {
	if err != nil {
		m.publishErrors.WithLabelValues(StatusOf(err).Code().String()).Inc()
		return
	}
	m.publishedMsgs.Add(float64(n))
	m.publishLatency.Observe(d.Seconds())
}

func (m *Metrics) settled(op string, results []*sundialv1.ReceiptResult) {
	for _, r := range results {
		code := codes.OK
		if r.GetError() != nil {
			code = codes.Code(r.GetError().GetCode())
		}
		m.receipts.WithLabelValues(op, code.String()).Inc()
		if op == "ack" && code == codes.OK {
			m.acked.Inc()
		}
	}
}
