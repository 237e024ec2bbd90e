package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/status"
)

// metrics are the request collectors of one proxy.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	published prometheus.Counter
	// topicLookups counts meta lookups of topics the routing table did not
	// list; reroutes counts publishes split again after a misplaced refusal.
	topicLookups prometheus.Counter
	reroutes     prometheus.Counter
	// receiveGivenBack counts copies a Receive over several shards leased
	// beyond max_messages and gave back.
	receiveGivenBack prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "sundial_proxy_requests_total",
			Help: "gRPC requests served, by full method and status code.",
		}, []string{"method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sundial_proxy_request_duration_seconds",
			Help:    "Time to serve a gRPC request (streams: their whole life), by full method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		published: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_published_messages_total",
			Help: "Messages stored through this proxy.",
		}),
		topicLookups: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_topic_lookups_total",
			Help: "Meta lookups (Admin.GetTopic) of topics the routing table did not list yet.",
		}),
		reroutes: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_publish_reroutes_total",
			Help: "Publish rounds split again because a broker refused messages as misplaced (WrongShard with a topic).",
		}),
		receiveGivenBack: f.NewCounter(prometheus.CounterOpts{
			Name: "sundial_proxy_receive_given_back_total",
			Help: "Copies leased for a Receive over several shards beyond its max_messages (shards answering at once) and given back with a nack.",
		}),
	}
}

func (m *metrics) observe(method string, err error, d time.Duration) {
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(method).Observe(d.Seconds())
}
