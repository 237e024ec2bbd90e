package proposer

import (
	"errors"
	"strings"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
)

// An entry whose result does not decode keeps the decoder's error in the
// chain; one that decodes to the wrong number of outcomes says so.
func TestOutcomesOfAMalformedResult(t *testing.T) {
	_, err := outcomes(sm.Result{Value: fsm.ResultApplied, Data: []byte{0xff}}, nil, 1)
	if err == nil || !strings.Contains(err.Error(), "outcome") {
		t.Fatalf("outcomes(undecodable) error = %v, want one about the outcome", err)
	}
	if perr := proto.Unmarshal([]byte{0xff}, &fsmpb.Outcomes{}); perr == nil || errors.Unwrap(err) == nil || errors.Unwrap(err).Error() != perr.Error() {
		t.Fatalf("outcomes(undecodable) error = %v, want it to wrap the decoder's error %v", err, perr)
	}

	two, err := proto.Marshal(&fsmpb.Outcomes{Outcomes: []*fsmpb.Outcome{{}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = outcomes(sm.Result{Value: fsm.ResultApplied, Data: two}, nil, 3)
	if err == nil || !strings.Contains(err.Error(), "2 outcomes for 3") || strings.Contains(err.Error(), "nil") {
		t.Fatalf("outcomes(2 for 3) error = %v, want one saying 2 outcomes for 3 commands", err)
	}
}
