package meta

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// The cluster holds at most MaxTopics topics and MaxGroupsPerTopic groups
// per topic, however they are created; a create past either is refused
// with an OverLimitError naming what to do, and changes nothing.
func TestCapsOnTopicsAndGroups(t *testing.T) {
	s := NewState()
	for i := range MaxTopics {
		if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: fmt.Sprintf("t%d", i)}}); code != ResultOK {
			t.Fatalf("topic %d of %d = %d, want ResultOK", i+1, MaxTopics, code)
		}
	}
	version := s.Version
	over := &Command{Op: OpCreateTopic, Topic: &Topic{Name: "one-too-many"}}
	code, _ := s.Apply(over)
	if err := ResultError(over, code); !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "delete topics") {
		t.Fatalf("topic past the cap: %v, want ErrOverLimit saying what to do", err)
	}
	if s.Version != version || s.Topics["one-too-many"] != nil {
		t.Fatalf("a refused create changed the state")
	}
	// An existing topic still answers as before.
	if code, _ := s.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "t0"}, IfNotExists: true}); code != ResultNoop {
		t.Fatalf("create-if-not-exists of an existing topic at the cap = %d, want ResultNoop", code)
	}

	g := NewState()
	if code, _ := g.Apply(&Command{Op: OpCreateTopic, Topic: &Topic{Name: "orders"}}); code != ResultOK {
		t.Fatal(code)
	}
	for i := 1; i < MaxGroupsPerTopic; i++ { // default is the first
		if code, _ := g.Apply(&Command{Op: OpCreateGroup, Name: "orders", Group: fmt.Sprintf("g%d", i)}); code != ResultOK {
			t.Fatalf("group %d = %d, want ResultOK", i+1, code)
		}
	}
	for _, c := range []*Command{
		{Op: OpCreateGroup, Name: "orders", Group: "late"},
		{Op: OpSubmitAdmin, Operations: []Operation{{Kind: OpKindCreateGroup, Topic: "orders", Group: "late"}}},
	} {
		code, _ := g.Apply(c)
		var ol *OverLimitError
		if err := ResultError(c, code); !errors.As(err, &ol) || ol.Group != "late" {
			t.Errorf("%s past the group cap: %v, want an OverLimitError naming group late", c.Op, err)
		}
	}
	if slices.Contains(g.Topics["orders"].Groups, "late") {
		t.Fatalf("a refused group was added")
	}
	many := make([]string, MaxGroupsPerTopic+1)
	for i := range many {
		many[i] = fmt.Sprintf("g%d", i)
	}
	wide := &Command{Op: OpCreateTopic, Topic: &Topic{Name: "wide", Groups: many}}
	if code, _ := g.Apply(wide); code != ResultOverLimit {
		t.Fatalf("a topic created with %d groups = %d, want ResultOverLimit", len(many), code)
	}
}
