// Package store owns backup destinations: where backup files and manifests
// are kept, named by a URL an operator gives (file:///absolute/dir or
// s3://bucket/prefix?endpoint=host:port&region=r&tls=false).
//
// A Store holds objects under slash-separated names relative to the
// destination's root. Its invariants, the same for every kind of
// destination:
//
//   - Put is atomic: a reader sees the whole object or none of it, never a
//     part. The file store writes a temporary file in the same directory,
//     syncs it, renames it over the name and syncs the directory; S3 makes a
//     PUT visible only once it completes.
//   - List answers every complete object whose name starts with a prefix,
//     sorted by name; a Put in progress is not listed.
//   - Open of a missing object fails with an error wrapping ErrNotFound;
//     Delete of a missing object succeeds.
//   - Secrets never reach a URL: Open refuses a URL carrying a password or a
//     credential-looking parameter (credentials come from the environment or
//     a credentials file, see Config), so String, which every log line and
//     answer uses, is safe to show.
//
// Names are checked the same way everywhere (see ErrBadName): no empty
// segment, and no segment starting with a dot, which keeps names inside the
// root and leaves dot-names to the file store's temporary files.
//
// Open does no I/O: an unreachable destination or a missing bucket shows on
// the first operation. Retrying wraps a Store so operations that fail for a
// passing reason are tried again with backoff; the S3 client also retries
// each request a few times itself, so one failed part of a large upload does
// not restart the whole object.
//
// A Store is safe for concurrent use by several goroutines; it starts none
// that outlive a call.
package store
