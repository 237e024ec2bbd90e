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
// queues that have credit, or until woken (a publish or nack applied,
// credit granted, a consumer attached). Each round it scans the due index
// up to now and proposes one Lease command for everything it picked. When
// the lease is pushed to consumers depends on what could go wrong:
//   - at-least-once copies are pushed as soon as the lease is queued in the
//     Raft log, if this replica holds its leader lease (a ReadIndex issued
//     less than LeaderLeaseTimeout ago passed, so no other leader can exist)
//     and no cancel or reschedule began since the pick; if this leader then
//     dies before the lease commits, the next one delivers the copy again,
//     which at-least-once allows;
//   - otherwise, and always for at-most-once copies, they are pushed only
//     after the lease committed, so a deposed leader never pushes a copy
//     another leader may also deliver, cancel or remove.
//
// Nothing about pending messages is kept in memory: every round reads the
// due index again. The per-topic and per-queue state (release-rate
// buckets, lateness histograms, fair-queueing state) is kept only for
// queues some attached consumer reads, so deleted topics and groups leave
// nothing behind.
//
// Goroutines: the loop, started by Start and joined by Stop; the leader
// lease renewer (with a LeaderLeaseTimeout), which issues a ReadIndex when
// less than half the lease is left and consumers are attached or a round
// asks; one goroutine per lease proposal awaiting commit. Consumer methods are called from gRPC stream
// goroutines; mu guards the consumer set and credits.
package dispatch
