// Package host owns a broker's Dragonboat NodeHost and everything running on
// it: the meta replica (a voter on initial members, a non-voting member on
// brokers that joined a running cluster; see Join), the event-shard replicas placed on
// this node by the meta group, and per shard a proposer and — while this
// node leads the shard — a dispatcher.
//
// A single loop goroutine (run) reacts to meta changes, leadership changes
// and a slow retry tick: it registers the node in the meta group, starts
// the replicas placed here (and drops those no longer placed), and starts
// or stops dispatchers as leadership moves. It makes no decision for the
// cluster: creating the first shards (an add_shards bootstrap, once every
// initial member registered) and putting starting shards on the ring
// (serve_shards) are the meta leader's executor's (operator.Shards), which
// the host only follows by starting the replicas the meta state places.
// The membership and leadership changes it makes on this node's replicas
// (moves.go) are asked by package operator (its RoutedHost, the healer,
// the meta-voter policy), which decides them.
// Dragonboat's callbacks only post events to that loop. A second goroutine
// (runHandovers) seals and closes the partition hand-overs of the shards
// this node leads (handover.go). Join runs on the gRPC goroutine of a
// JoinCluster call, on the meta leader only.
//
// The Raft log's syncs are counted per host by raftLogFS (syncfs.go), a
// wrapper of the LogDB Pebble's process-wide default FS installed when the
// package is initialised; each Host registers its raft dir in New and
// unregisters it in Stop.
//
// Lock order: Host.mu, then a dispatcher's own lock.
package host
