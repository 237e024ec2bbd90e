package fsm

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// threadCPU is the CPU time the calling OS thread used so far (user and
// system; the kernel keeps their sum exact), or false if unknown. A
// benchmark locked to its thread measures its own work with it, not the
// time it waited for a core on a shared machine.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
