package operator

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
)

// A host that cannot answer passes a change to the next host of the
// shard; a refusal ends the step.
func TestPasses(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), true},
		{"out of time", status.Error(codes.DeadlineExceeded, "deadline"), true},
		{"older broker", status.Error(codes.Unimplemented, "unknown method"), true},
		{"no replica here", apierr.FailedPrecondition(apierr.FieldViolation{Field: "shard_id", Description: "node 2 holds no replica of shard 100"}), true},
		{"a follower asked to transfer", apierr.NotLeader(100, 3, "127.0.0.1:7003"), true},
		{"wrapped", fmt.Errorf("node 2: %w", status.Error(codes.Unavailable, "x")), true},
		{"no replica on the target", apierr.FailedPrecondition(apierr.FieldViolation{Field: "to_node_id", Description: "no replica"}), false},
		{"bad request", apierr.InvalidArgument(apierr.FieldViolation{Field: "raft_addr", Description: "required"}), false},
		{"internal", status.Error(codes.Internal, "boom"), false},
		{"not a status", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := passes(tc.err); got != tc.want {
				t.Errorf("passes(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
