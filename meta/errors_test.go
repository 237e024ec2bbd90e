package meta

import (
	"errors"
	"testing"
)

// TestResultError applies commands to a state and checks the error each
// result code means names the command's topic and group.
func TestResultError(t *testing.T) {
	s := NewState()
	if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}}); code != ResultOK {
		t.Fatalf("create orders = %d, want ResultOK", code)
	}
	tests := []struct {
		name     string
		cmd      *Command
		sentinel error // nil: no error
		want     string
	}{
		{"created", &Command{Op: OpCreateTopic, Topic: &Topic{Name: "new"}}, nil, ""},
		{"topic exists", &Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}}, ErrExists, `topic "orders" already exists`},
		{"if not exists", &Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}, IfNotExists: true}, nil, ""},
		{"update missing topic", &Command{Op: OpUpdateTopic, Topic: &Topic{Name: "nope"}}, ErrNotFound, `topic "nope" does not exist`},
		{"delete missing topic", &Command{Op: OpDeleteTopic, Name: "nope"}, ErrNotFound, `topic "nope" does not exist`},
		{"group exists", &Command{Op: OpCreateGroup, Name: "orders", Group: "default"}, ErrExists, `group "default" of topic "orders" already exists`},
		{"group of missing topic", &Command{Op: OpCreateGroup, Name: "nope", Group: "g"}, ErrNotFound, `topic "nope" does not exist`},
		{"delete missing group", &Command{Op: OpDeleteGroup, Name: "orders", Group: "g"}, ErrNotFound, `group "g" of topic "orders" does not exist`},
		{"unknown op", &Command{Op: "frobnicate"}, ErrRefused, "meta: command refused: frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _ := s.Apply(tt.cmd)
			err := ResultError(tt.cmd, code)
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("ResultError(%s, %d) = %v, want nil", tt.cmd.Op, code, err)
				}
				return
			}
			if !errors.Is(err, tt.sentinel) || err.Error() != tt.want {
				t.Errorf("ResultError(%s, %d) = %v, want %q matching %v", tt.cmd.Op, code, err, tt.want, tt.sentinel)
			}
		})
	}
	var nf *NotFoundError
	if err := ResultError(&Command{Op: OpDeleteGroup, Name: "t", Group: "g"}, ResultNotFound); !errors.As(err, &nf) || nf.Topic != "t" || nf.Group != "g" {
		t.Errorf("ResultError(delete_group) = %#v, want *NotFoundError{t, g}", err)
	}
}
