package service

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lni/dragonboat/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/proposer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code codes.Code
		msg  string // "" leaves the message unchecked
	}{
		{"status passes", status.Error(codes.ResourceExhausted, "slow down"), codes.ResourceExhausted, "slow down"},
		{"field violations pass", apierr.InvalidArgument(apierr.FieldViolation{Field: "f", Description: "bad"}), codes.InvalidArgument, ""},
		{"topic not found", &meta.NotFoundError{Topic: "t"}, codes.NotFound, `topic "t" does not exist`},
		{"group not found, wrapped", fmt.Errorf("delete: %w", &meta.NotFoundError{Topic: "t", Group: "g"}), codes.NotFound, `group "g" of topic "t" does not exist`},
		{"topic exists", &meta.ExistsError{Topic: "t"}, codes.AlreadyExists, `topic "t" already exists`},
		{"being deleted", &meta.BeingDeletedError{Topic: "t"}, codes.FailedPrecondition, `topic "t" is being deleted: try again once the deletion is done`},
		{"busy", &meta.BusyError{Topic: "t"}, codes.Aborted, ""},
		{"refused", meta.ResultError(&meta.Command{Op: "x"}, meta.ResultInvalid), codes.Internal, ""},
		{"canceled", context.Canceled, codes.Canceled, ""},
		{"deadline", fmt.Errorf("propose: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ""},
		{"raft timeout", dragonboat.ErrTimeout, codes.Unavailable, ""},
		{"proposer closed", proposer.ErrClosed, codes.Unavailable, ""},
		{"anything else", errors.New("pebble: broke"), codes.Internal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := StatusOf(tt.err)
			if st.Code() != tt.code || (tt.msg != "" && st.Message() != tt.msg) {
				t.Errorf("StatusOf(%v) = %v %q, want %v %q", tt.err, st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
	if StatusOf(nil) != nil {
		t.Error("StatusOf(nil) != nil")
	}
}

// TestAdminAnswersMetaResultsWithCodes drives the Admin service against a
// real meta group: its result codes reach the caller as NotFound and
// AlreadyExists with the names in the message.
func TestAdminAnswersMetaResultsWithCodes(t *testing.T) {
	s, _ := singleNodeWithExecutor(t)
	a, ctx := s.admin, t.Context()
	create := func(ifNotExists bool) error {
		_, err := a.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "orders"}, IfNotExists: ifNotExists})
		return err
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"create", func() error { return create(false) }, codes.OK, ""},
		{"create again", func() error { return create(false) }, codes.AlreadyExists, `topic "orders" already exists`},
		{"create if not exists", func() error { return create(true) }, codes.OK, ""},
		{"get missing", func() error {
			_, err := a.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: "nope"})
			return err
		}, codes.NotFound, `topic "nope" does not exist`},
		{"update missing", func() error {
			_, err := a.UpdateTopic(ctx, &sundialv1.UpdateTopicRequest{Topic: &sundialv1.Topic{Name: "nope"}, UpdateMask: []string{"jitter_ms"}})
			return err
		}, codes.NotFound, `topic "nope" does not exist`},
		{"create group", func() error {
			_, err := a.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "orders", Group: "billing"})
			return err
		}, codes.OK, ""},
		{"create group again", func() error {
			_, err := a.CreateGroup(ctx, &sundialv1.CreateGroupRequest{Topic: "orders", Group: "billing"})
			return err
		}, codes.AlreadyExists, `group "billing" of topic "orders" already exists`},
		{"delete missing group", func() error {
			_, err := a.DeleteGroup(ctx, &sundialv1.DeleteGroupRequest{Topic: "orders", Group: "nope"})
			return err
		}, codes.NotFound, `group "nope" of topic "orders" does not exist`},
		{"list groups of missing topic", func() error {
			_, err := a.ListGroups(ctx, &sundialv1.ListGroupsRequest{Topic: "nope"})
			return err
		}, codes.NotFound, `topic "nope" does not exist`},
		{"delete topic", func() error {
			_, err := a.DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: "orders"})
			return err
		}, codes.OK, ""},
		{"delete topic again", func() error {
			_, err := a.DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: "orders"})
			return err
		}, codes.NotFound, `topic "orders" does not exist`},
	}
	for _, tt := range tests {
		st := StatusOf(tt.call()) // the status the Boundary answers
		if st.Code() != tt.code || st.Message() != tt.msg {
			t.Errorf("%s: %v %q, want %v %q", tt.name, st.Code(), st.Message(), tt.code, tt.msg)
		}
	}
}
