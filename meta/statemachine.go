package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// StateMachine adapts State to Dragonboat's IStateMachine.
type StateMachine struct {
	mu       sync.Mutex // guards state
	state    *State
	onChange func(version uint64)
}

// NewStateMachine returns a factory for the meta group's state machine.
// onChange, if not nil, is called after every applied change with the new
// version, on Dragonboat's apply goroutine; it must not block.
func NewStateMachine(onChange func(version uint64)) sm.CreateStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IStateMachine {
		return &StateMachine{state: NewState(), onChange: onChange}
	}
}

// Query is the Lookup argument answering a deep copy of the state.
type Query struct{}

// Update applies one command.
func (m *StateMachine) Update(e sm.Entry) (sm.Result, error) {
	c, err := DecodeCommand(e.Cmd)
	if err != nil {
		// A malformed command is skipped the same way on every replica.
		return sm.Result{Value: ResultInvalid}, nil
	}
	m.mu.Lock()
	before := m.state.Version
	code, data := m.state.Apply(c)
	after := m.state.Version
	m.mu.Unlock()
	if after != before && m.onChange != nil {
		m.onChange(after)
	}
	return sm.Result{Value: code, Data: data}, nil
}

// Lookup answers a deep copy of the state for a Query.
func (m *StateMachine) Lookup(q interface{}) (interface{}, error) {
	if _, ok := q.(Query); !ok {
		return nil, fmt.Errorf("meta: unknown query %T", q)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Clone(), nil
}

// SaveSnapshot writes the state as JSON.
func (m *StateMachine) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	m.mu.Lock()
	b, err := json.Marshal(m.state)
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("meta: encode snapshot: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// RecoverFromSnapshot replaces the state with a snapshot's.
func (m *StateMachine) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("meta: read snapshot: %w", err)
	}
	s := NewState()
	if err := json.Unmarshal(b, s); err != nil {
		return errors.Join(ErrMalformedCommand, err)
	}
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
	if m.onChange != nil {
		m.onChange(s.Version)
	}
	return nil
}

// Close releases nothing: the state lives in memory.
func (m *StateMachine) Close() error { return nil }
