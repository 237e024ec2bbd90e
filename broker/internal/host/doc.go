// Package host owns a broker's Dragonboat NodeHost and everything running on
// it: the meta replica (a voter on initial members, a non-voting member on
// brokers that joined a running cluster; see MetaClient.Join), the
// event-shard replicas placed on this node by the meta group, and per
// shard a proposer and — while this node leads the shard — a dispatcher.
//
// Host (host.go) owns the NodeHost, the state DB and two goroutines, and
// composes one small type per job; callers reach the one they need:
//
//   - MetaClient (metaclient.go, join.go): the meta group as this node
//     sees it: the applied state, linearizable reads, proposals, the
//     leader and membership, and joins (on the meta leader only);
//   - Replicas (replicas.go): the table of the replicas running here and
//     of every shard's leader (this node's view for hosted shards, leader
//     gossip for the others), and the routing-change signal;
//   - Moves (moves.go): membership and leadership changes through this
//     node's replicas, which package operator decides and asks for (its
//     RoutedHost, the healer, the meta-voter policy);
//   - placement (placement.go): following the meta state's placement,
//     starting and dropping replicas and their data, and reporting the
//     operation steps only this node can complete (wait-catch-up,
//     delete-data);
//   - handovers (handover.go): sealing and closing the partition
//     hand-overs of the shards this node leads;
//   - admission (admission.go): whether the meta state lets this node run
//     replicas at all (Refusal).
//
// A single loop goroutine (Host.run) reacts to meta changes, leadership
// changes and a slow retry tick: it registers the node in the meta group,
// has placement start and drop replicas, and starts or stops dispatchers
// as leadership moves (recorded in Replicas). It makes no decision for the
// cluster: creating the first shards (an add_shards bootstrap, once every
// initial member registered) and putting starting shards on the ring
// (serve_shards) are the meta leader's executor's (operator.Shards), which
// the host only follows by starting the replicas the meta state places.
// Dragonboat's callbacks only post events to that loop. A second goroutine
// runs the hand-over checks. MetaClient.Join runs on the gRPC goroutine of
// a JoinCluster call, and Moves on the executor's and healer's goroutines.
//
// The Raft log's syncs are counted per host by raftLogFS (syncfs.go), a
// wrapper of the LogDB Pebble's process-wide default FS installed when the
// package is initialised; each Host registers its raft dir in New and
// unregisters it in Stop.
//
// Lock order: Replicas.mu, then a dispatcher's own lock.
package host
