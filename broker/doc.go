// Package broker is a Sundial storage node: one Dragonboat NodeHost hosting
// event-shard replicas (and, on meta voters, a replica of the meta group)
// over one Pebble DB, serving the internal Shard API to proxies and the
// Admin and Cluster APIs.
//
//	b, err := broker.New(cfg, log, prometheus.NewRegistry())
//	err = b.Start(ctx)
//	defer b.Stop()
//
// Tests start brokers in-process exactly as the binary does.
package broker
