// Package history records what clients did to a Sundial cluster and what
// they were answered, Jepsen-style: every operation with its invoke time,
// its completion time and its answer, for package checker to judge.
//
// An operation's answer is OK (the server answered), Failed (the server
// answered a definite refusal: nothing happened) or Unknown (a timeout, a
// broken connection, an Internal error: it may or may not have happened).
// Deliveries are recorded as they are received; they are always OK.
//
// A Recorder is safe for concurrent use: Invoke and the completion methods
// may be called from any goroutine. Ops returns a copy for checking.
package history

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Kind says what an operation did.
type Kind string

// The kinds of operations.
const (
	Publish    Kind = "publish"
	Deliver    Kind = "deliver"
	Ack        Kind = "ack"
	Nack       Kind = "nack"
	Cancel     Kind = "cancel"
	Reschedule Kind = "reschedule"
)

// Answer is how definite an operation's outcome is.
type Answer string

// The answers.
const (
	Pending Answer = ""        // invoked, not completed yet
	OK      Answer = "ok"      // the server answered; Outcome says what happened
	Failed  Answer = "failed"  // definitely refused: nothing changed
	Unknown Answer = "unknown" // may or may not have taken effect
)

// Outcome names what a publish or change did, in the API's words:
// CREATED, IGNORED, REPLACED, DEBOUNCED, REJECTED for publishes (the
// KeyOutcome without its prefix), DONE, IN_FLIGHT, ALREADY_DELIVERED,
// NOT_FOUND for cancels and reschedules.
type Outcome string

// The outcomes a checker tells apart.
const (
	Created          Outcome = "CREATED"
	Ignored          Outcome = "IGNORED"
	Replaced         Outcome = "REPLACED"
	Debounced        Outcome = "DEBOUNCED"
	Rejected         Outcome = "REJECTED"
	Done             Outcome = "DONE"
	InFlight         Outcome = "IN_FLIGHT"
	AlreadyDelivered Outcome = "ALREADY_DELIVERED"
	NotFound         Outcome = "NOT_FOUND"
)

// Op is one client operation. Which fields are set depends on Kind.
type Op struct {
	Seq      int       `json:"seq"`
	Kind     Kind      `json:"kind"`
	Client   string    `json:"client,omitempty"`
	Invoke   time.Time `json:"invoke"`
	Complete time.Time `json:"complete,omitzero"` // zero while Pending or when Unknown without an answer
	Answer   Answer    `json:"answer"`
	Error    string    `json:"error,omitempty"`

	Topic string `json:"topic,omitempty"`
	Group string `json:"group,omitempty"`

	// Publish: the request and its answer (RequestID also a change's).
	RequestID string  `json:"request_id,omitempty"`
	Index     int     `json:"index,omitempty"` // message index inside the request
	Key       string  `json:"key,omitempty"`
	Conflict  string  `json:"conflict,omitempty"` // IGNORE, REPLACE, DEBOUNCE, REJECT
	Payload   string  `json:"payload,omitempty"`
	DelayMs   int64   `json:"delay_ms,omitempty"`
	MaxWaitMs int64   `json:"max_wait_ms,omitempty"`
	TTLMs     int64   `json:"ttl_ms,omitempty"`
	Outcome   Outcome `json:"outcome,omitempty"`
	// MessageID is the publish's or change's answered id, or the delivered id.
	MessageID string `json:"message_id,omitempty"`
	// DueMs is the answered due time (publish, reschedule) or the
	// delivery's due_at_unix_ms.
	DueMs int64 `json:"due_ms,omitempty"`

	// Deliver: what arrived. Ack and Nack: the receipt they answer.
	Receipt         string `json:"receipt,omitempty"`
	Attempt         int32  `json:"attempt,omitempty"`
	LeaseDeadlineMs int64  `json:"lease_deadline_ms,omitempty"`
	NackDelayMs     int64  `json:"nack_delay_ms,omitempty"`

	// Cancel and Reschedule: the selector (Key or MessageID) and, for a
	// reschedule, the requested delay (DelayMs).
	ByKey bool `json:"by_key,omitempty"`
}

// Recorder collects operations.
type Recorder struct {
	mu  sync.Mutex // guards ops and every *Op handed out
	ops []*Op
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Invoke records op as invoked now and returns its handle for completion.
func (r *Recorder) Invoke(op Op) *Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Seq = len(r.ops)
	if op.Invoke.IsZero() {
		op.Invoke = time.Now()
	}
	op.Answer = Pending
	p := &op
	r.ops = append(r.ops, p)
	return p
}

// Complete records op's answer now; fill edits the answer fields under
// the recorder's lock (it may be nil).
func (r *Recorder) Complete(op *Op, answer Answer, err error, fill func(*Op)) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Answer = answer
	if answer != Unknown {
		op.Complete = now
	}
	if err != nil {
		op.Error = err.Error()
	}
	if fill != nil {
		fill(op)
	}
}

// Delivered records a delivery received now.
func (r *Recorder) Delivered(op Op) {
	op.Invoke = time.Now()
	op.Complete = op.Invoke
	op.Kind = Deliver
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Seq = len(r.ops)
	op.Answer = OK
	r.ops = append(r.ops, &op)
}

// Ops returns a copy of every operation in invoke order. Operations still
// Pending are returned as Unknown.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, len(r.ops))
	for i, p := range r.ops {
		out[i] = *p
		if out[i].Answer == Pending {
			out[i].Answer = Unknown
		}
	}
	return out
}

// Len is the number of operations recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// WriteJSON writes ops one JSON object per line, for a failure report.
func WriteJSON(w io.Writer, ops []Op) error {
	enc := json.NewEncoder(w)
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	return nil
}

// ReadJSON reads ops written by WriteJSON.
func ReadJSON(r io.Reader) ([]Op, error) {
	var ops []Op
	dec := json.NewDecoder(r)
	for dec.More() {
		var op Op
		if err := dec.Decode(&op); err != nil {
			return nil, fmt.Errorf("history: op %d: %w", len(ops), err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}
