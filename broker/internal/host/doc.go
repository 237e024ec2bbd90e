// Package host owns a broker's Dragonboat NodeHost and everything running on
// it: the meta replica (on meta voters), the event-shard replicas placed on
// this node by the meta group, and per shard a proposer and — while this
// node leads the shard — a dispatcher.
//
// A single loop goroutine (run) reacts to meta changes, leadership changes
// and a slow retry tick: it registers the node in the meta group, proposes
// the initial shard bootstrap once every initial member registered, starts
// the replicas placed here, and starts or stops dispatchers as leadership
// moves. Dragonboat's callbacks only post events to that loop.
//
// Lock order: Host.mu, then a dispatcher's own lock.
package host
