package apierr

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestNotLeaderRoundTrip(t *testing.T) {
	err := fmt.Errorf("forward: %w", NotLeader(4, 2, "127.0.0.1:7502"))
	nl, ok := AsNotLeader(err)
	if !ok || nl.GetShardId() != 4 || nl.GetLeaderNodeId() != 2 || nl.GetLeaderAddr() != "127.0.0.1:7502" {
		t.Fatalf("AsNotLeader(%v) = %v, %v", err, nl, ok)
	}
	if _, ok := AsWrongShard(err); ok {
		t.Fatalf("AsWrongShard found a detail in a not-leader error")
	}
}

func TestInvalidArgumentCarriesViolations(t *testing.T) {
	err := InvalidArgument(FieldViolation{"messages[0].topic", "must not be empty"}, FieldViolation{"messages[1].delay_ms", "must not be negative"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code = %v, want InvalidArgument", status.Code(err))
	}
	got := Violations(err)
	if len(got) != 2 || got[1].Field != "messages[1].delay_ms" {
		t.Fatalf("Violations() = %v", got)
	}
}

func TestClassify(t *testing.T) {
	later, err := status.New(codes.ResourceExhausted, "broker busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, Permanent},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), Retry},
		{"wrapped unavailable", fmt.Errorf("client: publish: %w", status.Error(codes.Unavailable, "x")), Retry},
		{"aborted", status.Error(codes.Aborted, "conflict"), Retry},
		{"not leader with address", NotLeader(4, 2, "127.0.0.1:7502"), Retry},
		{"not leader without address", NotLeader(4, 0, ""), Retry},
		{"wrong shard", WrongShard(4, 9), Retry},
		{"plain failed precondition", status.Error(codes.FailedPrecondition, "group has consumers"), Permanent},
		{"plain not found", status.Error(codes.NotFound, "no such topic"), Permanent},
		{"invalid argument", InvalidArgument(FieldViolation{"request_id", "was used for other messages"}), Permanent},
		{"message over the size limit", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5242880 vs. 4194304)"), Permanent},
		{"resource exhausted with retry info", later.Err(), Retry},
		{"already exists", status.Error(codes.AlreadyExists, "topic exists"), Permanent},
		{"permission denied", status.Error(codes.PermissionDenied, "no"), Permanent},
		{"unimplemented", status.Error(codes.Unimplemented, "old broker"), Permanent},
		{"deadline exceeded status", status.Error(codes.DeadlineExceeded, "attempt timed out"), Unknown},
		{"context deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), Unknown},
		{"context canceled", context.Canceled, Unknown},
		{"internal", status.Error(codes.Internal, "bug"), Unknown},
		{"unknown code", status.Error(codes.Unknown, "?"), Unknown},
		{"plain error", errors.New("boom"), Unknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		idempotent bool
		want       bool
	}{
		{"retry, not idempotent", status.Error(codes.Unavailable, ""), false, true},
		{"unknown, idempotent", status.Error(codes.DeadlineExceeded, ""), true, true},
		{"unknown, not idempotent", status.Error(codes.DeadlineExceeded, ""), false, false},
		{"permanent, idempotent", status.Error(codes.InvalidArgument, ""), true, false},
	}
	for _, tc := range tests {
		if got := Retryable(tc.err, tc.idempotent); got != tc.want {
			t.Errorf("Retryable(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMisplacedRoundTrip(t *testing.T) {
	err := fmt.Errorf("publish: %w", Misplaced(101, 9, "orders", 3))
	ws, ok := AsWrongShard(err)
	if !ok || ws.GetShardId() != 101 || ws.GetRoutingVersion() != 9 || ws.GetTopic() != "orders" || ws.GetPartition() != 3 {
		t.Fatalf("AsWrongShard(%v) = %v, %v, want shard 101, version 9, orders/3", err, ws, ok)
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("code = %v, want NotFound", status.Code(err))
	}
	if ws, ok := AsWrongShard(WrongShard(101, 9)); !ok || ws.GetTopic() != "" {
		t.Fatalf("WrongShard() detail = %v, %v, want no topic (the shard is not hosted)", ws, ok)
	}
}

func TestRetryDelay(t *testing.T) {
	later, err := status.New(codes.ResourceExhausted, "rate limited").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"with RetryInfo", fmt.Errorf("publish: %w", later.Err()), 1500 * time.Millisecond},
		{"without", status.Error(codes.Unavailable, "down"), 0},
		{"not a status", errors.New("plain"), 0},
		{"nil", nil, 0},
	} {
		if got := RetryDelay(tc.err); got != tc.want {
			t.Errorf("%s: RetryDelay() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
