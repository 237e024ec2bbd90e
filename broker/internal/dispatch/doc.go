// Package dispatch runs the leader-side delivery loop of one event shard.
//
// A Dispatcher exists only while its broker leads the shard. Consumers
// (one per proxy subscribe stream) attach with a topic, a group, the
// partitions they read and some credit. However much credit a consumer
// grants, at most MaxCredit of its deliveries are on the broker at once
// (picked for it, or buffered and not yet taken).
//
// Before its first round a new leader passes a barrier: a ReadIndex whose
// index the local state machine has applied, so the previous term's
// entries (a cancel answered DONE, a reschedule, an ack, a committed
// lease) are visible before anything is scanned. Inspection reads wait for
// the same barrier (CaughtUp).
//
// The loop sleeps on a timer set to the earliest visible_at among the
// queues that have credit (or the next TTL expiry, a release-rate refill
// or the next sweep, whichever is first), or until woken (credit granted, a consumer attached, a full
// consumer taking its deliveries, a lease settled that left work). An
// applied insertion into the due index (a publish, a nack, a lease moving
// its copy to the deadline) wakes nothing: it only brings the timer forward
// to its visible_at if that is earlier, and the round then scans from the
// lowered floor; so a round runs when something may be due, about once per
// due instant, not once per applied command. Each round it scans the due index
// up to now and proposes one Lease command for everything it picked. When
// the lease is pushed to consumers depends on what could go wrong:
//   - at-least-once copies are pushed as soon as the lease is queued in the
//     Raft log, if this replica holds its leader lease (a ReadIndex issued
//     less than LeaderLeaseTimeout ago passed, so no other leader can exist)
//     and no change (cancel, reschedule, keyed REPLACE or DEBOUNCE) was in
//     progress at the pick or began before the lease was queued; if this leader then
//     dies before the lease commits, the next one delivers the copy again,
//     which at-least-once allows;
//   - otherwise, and always for at-most-once copies, they are pushed only
//     after the lease committed, so a deposed leader never pushes a copy
//     another leader may also deliver, cancel or remove.
//
// Nothing about pending messages is kept in memory but, for FAIR queues,
// which fairness keys have something due: every round reads the due index
// again. A round of a FAIR queue costs what it delivers plus the keys it
// finds due, never the keys with nothing due: each partition keeps the tree
// of its active fairness keys (those with something due or being leased),
// built from the fair index (one seek per key) by a new leader's first
// round, after a reset, or when more became due than one catch-up reads,
// and kept current by a catch-up that reads the due index from the queue's
// horizon (where the last one stopped; insertions lower it, like a scan
// floor) up to now. The weighted pick reads a key only to serve it, from
// the key's cursor; a key whose read finds nothing due leaves the tree
// until its copies become due.
//
// The per-topic and per-queue state (release-rate buckets, lateness
// histograms, fair-queueing state) is kept only for queues some attached
// consumer reads, so deleted topics and groups leave nothing behind.
//
// Besides rounds the loop runs the upkeep commands: TTL expiry when the
// earliest expiry is due or a round found copies expired under a lease,
// and the dedup sweep every SweepInterval however far off the next due
// copy is, in bounded commands repeated until nothing is left; a sweep
// whose ranges hold nothing to forget proposes nothing.
//
// # Parts
//
// The Dispatcher keeps the consumers, their credit, the round (pick,
// lease, push, settle) and the upkeep commands (upkeep.go). Each other piece of state has its own type, file
// and tests:
//   - dueIndex: the loop's reads of the store (due index from the scan
//     floors, FAIR queues' catch-up from their horizons and reads of each
//     key from its cursor, message bodies, the earliest TTL expiry, whether
//     a sweep has anything to forget)
//     (index.go);
//   - floors: where each queue's scan may start, and (a second instance)
//     where each FAIR queue's catch-up resumes (floors.go);
//   - fence: the cancels, reschedules and keyed rewrites in progress, which
//     keep a round from pushing ahead of its lease (fence.go);
//   - leaderLease: until when no other leader can exist (lease.go); the
//     barrier and its renewer are in barrier.go;
//   - limiter: release-rate token buckets per topic (limiter.go);
//   - fairScheduler: per partition of a FAIR queue, the tree of active
//     fairness keys with their virtual times and cursors (fair.go);
//   - lateness: first-delivery lateness histograms per queue (lateness.go);
//   - ttlTimer: when the next TTL expiry command is due (ttl.go).
//
// # Goroutines
//
// The loop, started by Start and joined by Stop, runs the barrier, rounds
// and upkeep; it alone touches the limiter, the fair scheduler and the TTL
// timer's own fields. The leader lease renewer (with a LeaderLeaseTimeout)
// issues a ReadIndex when a round asks (less than half the lease left)
// and, while consumers are attached, every half lease. One goroutine per
// lease proposal awaits its commit, then pushes and settles; one per
// release of undelivered copies proposes their nack. Stop joins them all. Attach,
// Detach, AddCredit, Revoke, BeginChange, Lateness and CaughtUp are called
// from gRPC goroutines, Changed from the state machine's apply goroutine.
//
// # Locks
//
// Dispatcher.mu guards the consumer set, credit and the round's picking
// state (with the limiter and the fair scheduler); Consumer.mu a
// consumer's buffered deliveries; floors (both instances), lateness and
// leaderLease each have their own mutex; fence and the TTL timer's reports are atomics.
// When more than one is held they are taken in this order, and none is
// held while proposing or waiting on a channel:
//
//	Dispatcher.mu → Consumer.mu
//	Dispatcher.mu → floors.mu (one instance at a time)
//	Dispatcher.mu → lateness.mu
//
// leaderLease.mu is never held with another lock.
package dispatch
