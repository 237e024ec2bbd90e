package broker

import "github.com/sundialmq/sundial/broker/internal/host"

// Errors of a data dir the broker cannot serve from, found by Dragonboat
// as it reads the Raft log; the error says what to do.
var (
	// ErrDataDirBehind: the data dir is an older copy of the one the node
	// last ran on (its Raft log ends before entries the cluster committed
	// with it).
	ErrDataDirBehind = host.ErrDataDirBehind
	// ErrRaftLogCorrupt: a Raft log file cannot be read.
	ErrRaftLogCorrupt = host.ErrRaftLogCorrupt
)

// SetDataDirFaultHandler sets what the process does when Dragonboat finds,
// while it runs, that the data dir cannot be served (an error wrapping
// ErrDataDirBehind or ErrRaftLogCorrupt): f is called with the error and
// must not return (print it and exit; sundial-broker exits with status 3).
// Found while Start runs, the fault is also what Start returns when f does
// not end the process. Without a handler, a fault found in a Dragonboat
// goroutine panics. It is process-wide, as Dragonboat's logger is.
func SetDataDirFaultHandler(f func(error)) { host.SetFaultHandler(f) }
