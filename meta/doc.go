// Package meta is the metadata Raft group of a Sundial cluster: which
// brokers exist, which event shards exist and where their replicas live,
// which topics exist, and the routing version that proxies follow.
//
// The state is small (it grows with nodes, shards and topics, never with
// messages), so it is an in-memory Dragonboat state machine snapshotted as
// JSON. Every change goes through a Command proposed to the group; Apply is
// deterministic: the proposer stamps times into commands, placement is a pure
// function of the state, and iteration is over sorted keys only.
//
// Invariants held by Apply:
//   - the replicas of a shard sit on distinct nodes;
//   - replica ids are allocated from one counter and never reused;
//   - Version grows by one with every change a proxy could route on;
//   - a node record is never deleted: a removed node keeps its id and
//     incarnation, so neither is reused, and it is removed only while it
//     holds no replica and no unfinished operation names it (unless
//     forced, for a dead node), never as a shard's last live holder
//     (nodes.go).
//
// Changes of a shard's replicas or leadership are Operations (operation.go):
// planned by the pure planner in internal/balancer from a cluster view, run
// step by step by an executor on the meta leader. The planner lives under
// internal/ and imports this package, so its caller is a package of this
// module other than meta itself.
//
// Shards added to a running cluster (add_shards, shards.go) start off the
// ring and join it together once each has a leader and the seed-groups
// operations registered the topics' groups on them (serve_shards); every
// topic partition whose owner changes then has an open Handover until its
// old shard holds nothing of it (close_handover).
//
// The state machine is touched by Dragonboat's apply goroutine (Update,
// snapshots) and by readers through Lookup, which answers a deep copy.
package meta
