//go:build !linux || arm

package host

import pvfs "github.com/cockroachdb/pebble/vfs"

// datasync is what Pebble's syncing file does elsewhere (not Linux, or 32-bit ARM Linux): the file's Sync.
func datasync(f pvfs.File, _ uintptr) error { return f.Sync() }
