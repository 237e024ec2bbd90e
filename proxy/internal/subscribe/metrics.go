package subscribe

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the subscription collectors of one proxy.
type Metrics struct {
	subscriptions prometheus.Gauge
	delivered     prometheus.Counter
	frames        prometheus.Counter
	reopens       prometheus.Counter
	replans       prometheus.Counter
	lateness      prometheus.Histogram
}

// NewMetrics registers the subscription collectors with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		subscriptions: f.NewGauge(prometheus.GaugeOpts{
			Name: "sundial_proxy_subscriptions",
			Help: "Client subscriptions open.",
		}),
		delivered: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_delivered_messages_total",
			Help: "Deliveries passed from shards to clients.",
		}),
		frames: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_delivery_frames_total",
			Help: "Frames of deliveries received from shards; delivered messages over this is the mean deliveries per frame.",
		}),
		reopens: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_shard_stream_reopens_total",
			Help: "Shard subscription streams reopened after a break.",
		}),
		replans: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_subscription_replans_total",
			Help: "Subscriptions moved onto a new plan (shards and their partitions) after a routing table change.",
		}),
		lateness: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "sundial_proxy_delivery_lateness_seconds",
			Help:    "First deliveries: time handed to the client stream minus the due time.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
}
