package meta

import (
	"encoding/json"
	"errors"
	"testing"
)

// A malformed command names both the sentinel and the decoder's cause, so a
// caller can tell bad JSON (with its offset) from a well-formed bad command.
func TestDecodeCommandWrapsCause(t *testing.T) {
	_, err := DecodeCommand([]byte(`{"op":`))
	if !errors.Is(err, ErrMalformedCommand) {
		t.Fatalf("DecodeCommand(truncated) error = %v, want ErrMalformedCommand", err)
	}
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		t.Fatalf("DecodeCommand(truncated) error = %v, want it to wrap a *json.SyntaxError", err)
	}
}
