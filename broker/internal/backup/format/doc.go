// Package format owns what a backup is on its destination: the backup file
// that holds one capture (a shard's, or the meta group's catalog), the
// manifest that makes a backup exist, where both are kept, and the pure
// logic over manifests (which backups a restore needs, in which order, and
// which ones retention may delete).
//
// A backup file is
//
//	magic      8 bytes "SUNDIALB"
//	version    uvarint, FormatVersion
//	header     uvarint length (≤ 1 MiB), then JSON of Header
//	records    op byte: 1 set | 2 delete; uvarint key length, key;
//	           for set, uvarint value length, value (each ≤ 64 MiB)
//	end        op byte 0xFF; uvarint record count;
//	           32-byte SHA-256 of every byte before the end op
//
// A Reader returns io.EOF only after a complete end whose count and
// checksum match the bytes it read, and nothing after it: a file cut short
// reads as ErrTruncated, one altered as ErrCorrupt, one from a newer
// Sundial as *VersionError. A Writer's Summary carries the SHA-256 of the
// whole file, end included, which the manifest records.
//
// A destination holds each backup under backups/<id>/: shard-<n>.sdb per
// shard, meta.sdb, and MANIFEST.json, written last. A backup without a
// manifest does not exist: it is unfinished (in progress, or abandoned),
// listed apart so it can be cleaned. Backup ids (NewID) sort by the time
// they were made.
//
// A full backup captures every key of each shard; an incremental one
// captures the keys that changed since its parent's capture of the shard
// (or, when the shard's change journal did not cover that, the shard in
// full). A restore applies, per shard, the latest full capture in the
// chain from the root full backup to the backup chosen, then every
// incremental capture after it, each starting at the index the one before
// it ended (ShardPlan).
//
// Writer and Reader are used by one goroutine each; everything else is
// pure or does its I/O through the store.Store it is given.
package format
