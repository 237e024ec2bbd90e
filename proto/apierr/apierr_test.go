package apierr

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
