// Package dispatch runs the leader-side delivery loop of one event shard.
//
// A Dispatcher exists only while its broker leads the shard. Consumers
// (one per proxy subscribe stream) attach with a topic, a group, the
// partitions they read and some credit. The loop sleeps on a timer set to
// the earliest visible_at among the queues that have credit, or until woken
// (a publish or nack applied, credit granted, a consumer attached). Each
// round it scans the due index up to now, proposes one Lease command for
// everything it picked (lease before delivery: a delivery is pushed only
// after its lease committed, so a failover never loses track of it), then
// pushes the deliveries to consumers. Nothing about pending messages is kept
// in memory: every round reads the due index again.
//
// Goroutines: the loop, started by Start and joined by Stop. Consumer
// methods are called from gRPC stream goroutines; mu guards the consumer
// set and credits.
package dispatch
