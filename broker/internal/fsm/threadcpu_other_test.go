//go:build !linux

package fsm

import "time"

// threadCPU is unknown off Linux.
func threadCPU() (time.Duration, bool) { return 0, false }
