// Package operator is the one home of cluster control on a broker. It owns:
//
//   - the executor (operator.go, ends.go, admin.go): on the meta leader,
//     the persisted operations run step by step;
//   - RoutedHost (routed.go), the executor's host: a shard's membership
//     and leadership changes made through this node's replica or a peer
//     hosting the shard;
//   - the shard decisions of the meta leader (shards.go);
//   - the Healer (healer.go, liveness.go): node liveness, dead and alive
//     declarations, the repairs of a dead or force-removed node;
//   - the meta-voter policy (metavoters.go): which node gets a meta vote
//     when a voter dies or leaves, or while fewer than three are live;
//   - PeerProber (probe.go), the one "does this node answer as node N"
//     check, shared by the healer, the meta-voter policy and node removal.
//
// The gRPC services (package service) call into it; it never calls them.
// It reaches the broker's host (package host) through small interfaces
// (Host, ReplicaHost, HealerHost, ShardsHost, VoterHost), which the broker
// fills with host.MetaClient, host.Replicas and host.Moves, as host's own
// tests run the shard decisions; it calls other brokers (RoutedHost, the
// admin steps, PeerProber) over the broker's one connection cache,
// package peer.
//
// The executor: on the broker whose meta replica leads the meta group,
// it runs the operations persisted in the meta state step by step (DESIGN.md §6's move
// sequence), at most Config.MaxRunning at once. Every step's completion is
// recorded in the meta state before the next starts, so a new meta leader
// resumes each operation at its persisted step; the membership changes are
// idempotent, so a step that ran but was not recorded runs again safely.
//
// The executor asks its Host for the membership and leadership changes;
// on a broker that is RoutedHost (routed.go), which makes them through
// this node's replica of the shard when it holds one, else through a
// broker that hosts the shard (its leader first), so the meta leader moves
// shards it holds no replica of.
//
// Two steps are completed by the node they name, not by the executor: a
// joining replica's host reports wait-catch-up once its replica serves a
// read index, and the host of a removed replica reports delete-data once
// the replica is stopped and its data gone (package host). The executor
// waits for them within the step's timeout.
//
// A step that fails or times out follows its rollback rule: remove-new
// takes the added replica out of the membership and ends the operation
// rolled back (the shard keeps the replicas it had); retry runs the step
// again; none ends the operation failed. A step naming a node that is dead
// or removed fails at once rather than wait for its timeout, except
// remove-replica (the shard's live replicas make it) and delete-data:
// that one is skipped, at once for a dead or removed node and at its
// timeout for a node that does not report, with the reason recorded in
// the step (ends.go); the node's host deletes the data itself. An
// operation an operator cancelled (meta cancel_operation) is rolled back
// from the step it is at (ends.go).
//
// Admin operations (topic and group changes across shards) run through the
// same step loop, in a loop of their own: see admin.go. The executor also
// runs the shard decisions of the meta leader, creating the first shards
// and putting starting shards on the ring (Shards, shards.go), on a
// goroutine of their own.
package operator
