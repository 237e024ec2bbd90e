package host

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialmq/sundial/meta"
)

// nodeCollector serves this broker's own replica and leader counts,
// computed at scrape time: the replicas the meta state places on this node
// and the hosted shards whose leader is a replica here. Each broker serves
// its own, labelled with its node id, so sum by (node_id) over every broker
// is the cluster's placement, and it stays right across meta-leader
// changes. Collect runs on the scrape goroutine and reads the cached meta
// state and the replica table (under Replicas.mu).
type nodeCollector struct {
	h                 *Host
	replicas, leaders *prometheus.Desc
}

func newNodeCollector(h *Host) *nodeCollector {
	return &nodeCollector{
		h: h,
		replicas: prometheus.NewDesc("sundial_broker_replicas",
			"Event-shard replicas the meta state places on this broker.", []string{"node_id"}, nil),
		leaders: prometheus.NewDesc("sundial_broker_leaders",
			"Event shards whose leader is this broker's replica.", []string{"node_id"}, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.replicas
	ch <- c.leaders
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	self := meta.NodeID(c.h.cfg.NodeID)
	replicas := 0
	for _, sh := range c.h.meta.Meta().Shards {
		if _, ok := sh.ReplicaOn(self); ok {
			replicas++
		}
	}
	leaders := 0
	c.h.replicas.mu.RLock()
	for _, s := range c.h.replicas.shards {
		if s.leaderID != 0 && s.leaderID == s.replicaID {
			leaders++
		}
	}
	c.h.replicas.mu.RUnlock()
	node := strconv.FormatUint(c.h.cfg.NodeID, 10)
	ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(replicas), node)
	ch <- prometheus.MustNewConstMetric(c.leaders, prometheus.GaugeValue, float64(leaders), node)
}
