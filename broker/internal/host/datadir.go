package host

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/sundialmq/sundial/broker/internal/identity"
)

// Errors of a data dir the broker cannot serve from. Dragonboat finds them
// while it reads the Raft log (at start, or when a peer's message shows
// the log is behind) and panics; the host turns that panic into a
// *DataDirError wrapping one of these, hands it to the fault handler (see
// SetFaultHandler) and, without one, panics with it.
var (
	// ErrDataDirBehind: the Raft log ends before entries the cluster has
	// already committed with this node: the data dir is an older copy of
	// the one the node last ran on.
	// identity.Check finds the same at start when the copy predates the
	// node's last start.
	ErrDataDirBehind = identity.ErrBehind
	// ErrRaftLogCorrupt: a file of the Raft log fails its checksum or
	// cannot be read.
	ErrRaftLogCorrupt = errors.New("raft log corrupt")
)

// DataDirError says what is wrong with a data dir and what to do.
type DataDirError struct {
	Kind    error // ErrDataDirBehind or ErrRaftLogCorrupt
	DataDir string
	NodeID  uint64
	Detail  string // Dragonboat's words
}

func (e *DataDirError) Error() string {
	fix := fmt.Sprintf("restore the data dir node %d last ran on, or remove the node (shardctl remove-node --force %d) and start this machine on an empty data dir with --join as a new node; "+
		"starting again on this data dir fails the same way", e.NodeID, e.NodeID)
	if errors.Is(e.Kind, ErrRaftLogCorrupt) {
		return fmt.Sprintf("%v: the Raft log in %s cannot be read (%s): %s", e.Kind, e.DataDir, e.Detail, fix)
	}
	return fmt.Sprintf("%v: data dir %s is older than the one node %d last ran on (an old copy or a restored backup): "+
		"its Raft log ends before entries the cluster already committed with this node (%s): %s", e.Kind, e.DataDir, e.NodeID, e.Detail, fix)
}

func (e *DataDirError) Unwrap() error { return e.Kind }

// dataDirFault classifies a message Dragonboat panics with: a
// *DataDirError for a log behind the cluster or a corrupt log file, nil
// for anything else (a bug, which keeps its stack).
func dataDirFault(detail string, dir string, node uint64) error {
	var kind error
	switch {
	case strings.Contains(detail, "invalid commitTo index"):
		kind = ErrDataDirBehind
	case strings.Contains(detail, "checksum mismatch"), strings.Contains(detail, "invalid table"),
		strings.Contains(detail, "corrupt"), strings.Contains(detail, "pebble: truncated"):
		kind = ErrRaftLogCorrupt
	default:
		return nil
	}
	if i := strings.IndexByte(detail, '\n'); i >= 0 {
		detail = detail[:i] // Dragonboat's errors carry their own stack after the first line
	}
	return &DataDirError{Kind: kind, DataDir: dir, NodeID: node, Detail: detail}
}

// The data dir and node of the broker started most recently (Dragonboat's
// logger is process-wide, see raftLog), and the process's fault handler.
var (
	faultDir     atomic.Pointer[dataDirOf]
	faultHandler atomic.Pointer[func(error)]
)

type dataDirOf struct {
	dir  string
	node uint64
}

// SetFaultHandler sets what the process does with a *DataDirError found
// while Dragonboat runs: typically print it and exit (sundial-broker exits
// with status 3). Found in a Dragonboat goroutine, the fault cannot be
// returned anywhere; f must not return (if it does, the panic goes on).
// Without a handler the host panics with the error; New and Start recover
// that panic and return it. Process-wide, like Dragonboat's logger.
func SetFaultHandler(f func(error)) { faultHandler.Store(&f) }

// raiseFault hands a fault to the handler, then panics with it.
func raiseFault(err error) {
	if f := faultHandler.Load(); f != nil && *f != nil {
		(*f)(err)
	}
	panic(err)
}

// recoverFault, deferred, turns a *DataDirError panic into *err; other
// panics go on.
func recoverFault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if de, ok := r.(*DataDirError); ok {
		*err = de
		return
	}
	panic(r)
}
