// Package backup carries out a broker's part of backups and restores
// (docs/operations.md, "Backups"); the files' format is package format,
// the destinations package store, and the runs are persisted in the meta
// group (meta/backup.go) and driven by the meta leader's executor
// (operator/backups.go).
//
// It owns:
//
//   - Capture (capture.go): a shard's capture on the broker that leads it.
//     A Journal command proposed through the shard's proposer turns the
//     change journal on and, once applied, proves the replica holds every
//     entry committed before it; a Pebble snapshot then pins the shard at
//     its applied index (Pebble writes a batch and its applied index
//     together, so the snapshot is one Raft index of the shard), and
//     fsm.Capture writes it — whole, or the journaled changes since the
//     parent backup's index — to a spool file in the data dir, which is
//     uploaded with retries and removed. Publishes and deliveries go on
//     meanwhile: the snapshot costs them nothing.
//   - the catalog and manifest files (files.go), written by the meta
//     leader's executor: the catalog first, the manifest last, from the
//     run's persisted captures.
//   - Restore (restore.go): the coordinator of a restore into a new
//     cluster, run on the broker serving the RestoreBackup call.
//   - Stores (stores.go): destinations opened with the broker's
//     credentials, uploads retried with backoff, counted in metrics.
//
// Goroutines: none of its own; every function runs on its caller's.
package backup
