package dispatch

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sundialmq/sundial/broker/internal/fsm"
)

// memStateMachine opens shard's state machine on an in-memory Pebble,
// closed when the test ends. Its changes reach *d once the test sets it,
// as a leader's host hands them to its dispatcher.
func memStateMachine(tb testing.TB, d **Dispatcher) (*fsm.StateMachine, *pebble.DB) {
	tb.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		tb.Fatalf("pebble.Open() error = %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	s := fsm.New(db, shard, func(_ uint64, c fsm.Change) {
		if *d != nil {
			(*d).Changed(c.Lows, c.ExpiryLow, c.Reset)
		}
	})
	return s, db
}
