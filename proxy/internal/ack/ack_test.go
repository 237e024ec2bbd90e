package ack

import (
	"context"
	"errors"
	"fmt"
	"testing"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/sundialmq/sundial/proto/receipt"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func rc(shard uint64, n uint64) string {
	return receipt.Receipt{Message: receipt.NewMessageID(shard, n, 0), Group: "default", Attempt: 1}.String()
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name      string
		in        []string
		want      string // groups as shard:[indices]
		malformed []int
	}{
		{"empty", nil, "[]", nil},
		{"one shard", []string{rc(3, 1), rc(3, 2)}, "[3:[0 1]]", nil},
		{"two shards interleaved", []string{rc(3, 1), rc(5, 1), rc(3, 2)}, "[3:[0 2] 5:[1]]", nil},
		{"malformed", []string{"!!", rc(5, 1), "", rc(5, 2)}, "[5:[1 3]]", []int{0, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			groups, results := Split(tc.in)
			var parts []string
			for _, g := range groups {
				parts = append(parts, fmt.Sprintf("%d:%v", g.Shard, g.Indices))
			}
			if got := fmt.Sprintf("%v", parts); got != tc.want {
				t.Errorf("Split(%s) groups = %s, want %s", tc.name, got, tc.want)
			}
			var bad []int
			for i, r := range results {
				if r != nil {
					if codes.Code(r.GetError().GetCode()) != codes.InvalidArgument {
						t.Errorf("Split(%s) result %d code = %d, want InvalidArgument", tc.name, i, r.GetError().GetCode())
					}
					bad = append(bad, i)
				}
			}
			if fmt.Sprint(bad) != fmt.Sprint(tc.malformed) {
				t.Errorf("Split(%s) malformed = %v, want %v", tc.name, bad, tc.malformed)
			}
		})
	}
}

func TestRunMergesInOrder(t *testing.T) {
	in := []string{rc(3, 1), "bad", rc(5, 1), rc(3, 2), rc(7, 1)}
	call := func(_ context.Context, shard uint64, rs []string) ([]*sundialv1.ReceiptResult, error) {
		if shard == 7 {
			return nil, errors.New("boom")
		}
		out := make([]*sundialv1.ReceiptResult, len(rs))
		for i, r := range rs {
			out[i] = &sundialv1.ReceiptResult{Receipt: r, LeaseDeadlineUnixMs: int64(shard)}
		}
		return out, nil
	}
	toStatus := func(err error) *statuspb.Status {
		return &statuspb.Status{Code: int32(codes.Unavailable), Message: err.Error()}
	}
	res := Run(context.Background(), in, call, toStatus)
	want := []string{"3", "code:3", "5", "3", "code:14"}
	for i, r := range res {
		got := fmt.Sprint(r.GetLeaseDeadlineUnixMs())
		if r.GetError() != nil {
			got = fmt.Sprintf("code:%d", r.GetError().GetCode())
		}
		if got != want[i] {
			t.Errorf("Run result %d = %s, want %s", i, got, want[i])
		}
		if r.GetReceipt() != in[i] {
			t.Errorf("Run result %d receipt = %q, want %q", i, r.GetReceipt(), in[i])
		}
	}
}
