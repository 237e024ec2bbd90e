// Package fsm is the event-shard state machine: Dragonboat's
// IOnDiskStateMachine over the broker's shared Pebble DB.
//
// The Raft log is the write-ahead log. Update applies a run of entries as one
// Pebble batch written without sync, together with the applied index, so a
// crash leaves the state at some applied index that Open reports and
// Dragonboat replays from there; Sync makes the batches durable.
//
// A snapshot recovery writes the shard's range in bounded batches under a
// recovery marker (see RecoverFromSnapshot): memory stays flat whatever the
// shard's size, and Open clears a range whose recovery was cut short.
//
// Apply is deterministic: every time in a command was stamped by the leader,
// message ids derive from the Raft index and the position in the entry, and
// nothing iterates a Go map. Two replicas that applied the same entries hold
// byte-identical key ranges (see StateHash).
//
// A message stored with one copy keeps that copy's state in its body, two
// keys in all (body and due entry); one stored with several copies keeps a
// copy record per group, as every message of format 1 did. ReadCopy and
// Copies read both forms, for the state machine and every other reader.
//
// Leases are fenced: a lease item names the attempt, visible_at and content
// version of the copy as the dispatcher read it, and is refused (STALE) if
// the copy moved or was rewritten since. Every rewrite (keyed REPLACE or
// DEBOUNCE, reschedule) raises the version on the body and each copy, so a
// lease commits only for the payload that is current when it applies.
//
// Concurrency: Dragonboat calls Update, Sync, PrepareSnapshot and
// RecoverFromSnapshot from its apply goroutine, one at a time; SaveSnapshot
// and Lookup may run concurrently with Update. The leader's dispatcher reads
// the due index straight from Pebble, which is safe alongside the writer.
package fsm
