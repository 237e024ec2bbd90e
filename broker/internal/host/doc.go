// Package host owns a broker's Dragonboat NodeHost and everything running on
// it: the meta replica (a voter on initial members, a non-voting member on
// brokers that joined a running cluster; see Join), the event-shard replicas placed on
// this node by the meta group, and per shard a proposer and — while this
// node leads the shard — a dispatcher.
//
// A single loop goroutine (run) reacts to meta changes, leadership changes
// and a slow retry tick: it registers the node in the meta group; on the
// meta leader, once every initial member registered, proposes the first
// shards (an add_shards bootstrap: they start off the ring like shards
// added at runtime); starts the replicas placed here; on the meta leader
// puts starting shards (the first ones and added ones alike) on the ring
// once each has a leader (serve_shards); and starts or stops dispatchers
// as leadership moves.
// Dragonboat's callbacks only post events to that loop. A second goroutine
// (runHandovers) seals and closes the partition hand-overs of the shards
// this node leads (handover.go). Join runs on the gRPC goroutine of a
// JoinCluster call, on the meta leader only.
//
// Lock order: Host.mu, then a dispatcher's own lock.
package host
