// Package receipt encodes message ids and delivery receipts, the two opaque
// strings Sundial hands to clients.
//
// A message id names a message for its whole life: the event shard that
// stores it, the Raft index of the entry that published it and its position
// in that entry. It is 32 lower-case hex digits, and ids of one shard sort in
// publish order.
//
// A receipt names one delivery attempt of one group's copy of a message. The
// proxy routes acks by the shard inside it; the shard refuses a receipt whose
// attempt is not the copy's current one, so a late ack never touches a newer
// lease. With authentication on, the proxy signs every receipt it hands
// out and verifies the signature when the receipt comes back (signed.go):
// a receipt built from a public message id, or altered, is refused before
// it reaches a broker, and the topic it names is the one its holder's
// role is checked against. Brokers see only plain receipts.
package receipt

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrMalformed is returned for strings that are not ids or receipts.
var ErrMalformed = errors.New("receipt: malformed")

// IDBytes is the length of an encoded message id.
const IDBytes = 16

// MessageID is the binary form of a message id.
type MessageID [IDBytes]byte

// NewMessageID builds the id of the pos-th message of the Raft entry at index
// of shard.
func NewMessageID(shard uint64, index uint64, pos uint32) MessageID {
	var id MessageID
	binary.BigEndian.PutUint32(id[0:4], uint32(shard))
	binary.BigEndian.PutUint64(id[4:12], index)
	binary.BigEndian.PutUint32(id[12:16], pos)
	return id
}

// Shard is the event shard that stores the message.
func (id MessageID) Shard() uint64 { return uint64(binary.BigEndian.Uint32(id[0:4])) }

// String is the client-facing form.
func (id MessageID) String() string { return hex.EncodeToString(id[:]) }

// ParseMessageID parses the client-facing form.
func ParseMessageID(s string) (MessageID, error) {
	var id MessageID
	if len(s) != 2*IDBytes {
		return id, fmt.Errorf("%w: message id %q has %d characters, want %d", ErrMalformed, s, len(s), 2*IDBytes)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: message id %q is not hex", ErrMalformed, s)
	}
	return id, nil
}

// MessageIDFromBytes converts stored bytes to an id.
func MessageIDFromBytes(b []byte) (MessageID, error) {
	var id MessageID
	if len(b) != IDBytes {
		return id, fmt.Errorf("%w: message id of %d bytes", ErrMalformed, len(b))
	}
	copy(id[:], b)
	return id, nil
}

// Receipt names one delivery attempt.
type Receipt struct {
	Message MessageID
	Group   string
	Attempt uint32
}

const version = 1

// maxGroupBytes bounds the group name inside a receipt.
const maxGroupBytes = 256

// Shard is the event shard the receipt's message lives on.
func (r Receipt) Shard() uint64 { return r.Message.Shard() }

// String encodes the receipt as URL-safe base64 text.
func (r Receipt) String() string {
	buf := make([]byte, 0, 1+IDBytes+binary.MaxVarintLen32+len(r.Group))
	buf = append(buf, version)
	buf = append(buf, r.Message[:]...)
	buf = binary.AppendUvarint(buf, uint64(r.Attempt))
	buf = append(buf, r.Group...)
	return base64.RawURLEncoding.EncodeToString(buf)
}

// Parse decodes a receipt made by String.
func Parse(s string) (Receipt, error) {
	var r Receipt
	buf, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return r, fmt.Errorf("%w: receipt is not base64", ErrMalformed)
	}
	if len(buf) < 1+IDBytes+1 || buf[0] != version {
		return r, fmt.Errorf("%w: receipt too short or of an unknown version", ErrMalformed)
	}
	copy(r.Message[:], buf[1:1+IDBytes])
	attempt, n := binary.Uvarint(buf[1+IDBytes:])
	if n <= 0 || attempt == 0 || attempt > 1<<31 {
		return r, fmt.Errorf("%w: receipt attempt", ErrMalformed)
	}
	r.Attempt = uint32(attempt)
	group := buf[1+IDBytes+n:]
	if len(group) == 0 || len(group) > maxGroupBytes {
		return r, fmt.Errorf("%w: receipt group", ErrMalformed)
	}
	r.Group = string(group)
	return r, nil
}
