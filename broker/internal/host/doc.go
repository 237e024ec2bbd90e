// Package host owns a broker's Dragonboat NodeHost and everything running on
// it: the meta replica (a voter on initial members, a non-voting member on
// brokers that joined a running cluster; see Join), the event-shard replicas placed on
// this node by the meta group, and per shard a proposer and — while this
// node leads the shard — a dispatcher.
//
// A single loop goroutine (run) reacts to meta changes, leadership changes
// and a slow retry tick: it registers the node in the meta group, proposes
// the initial shard bootstrap once every initial member registered, starts
// the replicas placed here (shards added at runtime start the same way),
// puts added shards on the ring once each has a leader (on the meta
// leader), and starts or stops dispatchers as leadership moves.
// Dragonboat's callbacks only post events to that loop. A second goroutine
// (runHandovers) seals and closes the partition hand-overs of the shards
// this node leads (handover.go). Join runs on the gRPC goroutine of a
// JoinCluster call, on the meta leader only.
//
// Lock order: Host.mu, then a dispatcher's own lock.
package host
