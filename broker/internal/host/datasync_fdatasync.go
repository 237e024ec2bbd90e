//go:build linux && !arm

package host

import (
	"syscall"

	pvfs "github.com/cockroachdb/pebble/vfs"
)

// datasync is what Pebble's syncing file does on Linux (but 32-bit ARM): fdatasync on the
// descriptor, the file's Sync (fsync) without one.
func datasync(f pvfs.File, fd uintptr) error {
	if fd == 0 {
		return f.Sync()
	}
	return syscall.Fdatasync(int(fd))
}
