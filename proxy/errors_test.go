package proxy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
)

func TestToStatus(t *testing.T) {
	tests := []struct {
		name string
		in   error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		{"broker status passes", status.Error(codes.ResourceExhausted, "full"), codes.ResourceExhausted},
		{"wrapped not leader keeps code", fmt.Errorf("forward: %w", apierr.NotLeader(1, 2, "a:1")), codes.FailedPrecondition},
		{"unknown becomes internal", status.Error(codes.Unknown, "?"), codes.Internal},
		{"plain error becomes internal", errors.New("boom"), codes.Internal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(toStatus(tc.in)); got != tc.want {
				t.Errorf("toStatus(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	if _, ok := apierr.AsNotLeader(toStatus(fmt.Errorf("w: %w", apierr.NotLeader(1, 2, "a:1")))); !ok {
		t.Errorf("toStatus dropped the NotLeader detail")
	}
}
