package batch

import (
	"fmt"
	"testing"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeLocator puts partition p of any topic on shard 100+p.
type fakeLocator map[string]uint32

func (f fakeLocator) Partitions(topic string) uint32 {
	if n, ok := f[topic]; ok {
		return n
	}
	return 1
}

func (fakeLocator) Locate(_ string, p uint32) uint64 { return 100 + uint64(p) }

func msgs(specs ...string) []*sundialv1.Message {
	var out []*sundialv1.Message
	for _, s := range specs {
		var topic, key string
		fmt.Sscanf(s, "%s %s", &topic, &key)
		out = append(out, &sundialv1.Message{Topic: topic, Key: key, Payload: []byte(s)})
	}
	return out
}

func TestSplit(t *testing.T) {
	loc := fakeLocator{"wide": 4}
	tests := []struct {
		name string
		in   []*sundialv1.Message
		want map[uint64][]int // shard → request indices
	}{
		{"unknown topic is one partition", msgs("a", "b", "c"), map[uint64][]int{100: {0, 1, 2}}},
		{"round robin without key", msgs("wide", "wide", "wide", "wide", "wide"), map[uint64][]int{100: {0, 4}, 101: {1}, 102: {2}, 103: {3}}},
		{"mixed topics keep order", msgs("a", "wide", "b", "wide"), map[uint64][]int{100: {0, 1, 2}, 101: {3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts := Split(tc.in, loc, NewPartitioner())
			got := map[uint64][]int{}
			for i, p := range parts {
				if i > 0 && parts[i-1].Shard >= p.Shard {
					t.Errorf("Split parts not in ascending shard order: %d then %d", parts[i-1].Shard, p.Shard)
				}
				got[p.Shard] = p.Indices
				for j, idx := range p.Indices {
					if p.Messages[j].GetMessage() != tc.in[idx] {
						t.Errorf("part %d message %d is not request message %d", p.Shard, j, idx)
					}
					if want := uint32(p.Shard - 100); p.Messages[j].GetPartition() != want {
						t.Errorf("part %d message %d partition = %d, want %d", p.Shard, j, p.Messages[j].GetPartition(), want)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Split(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestSplitKeyIsStable(t *testing.T) {
	loc := fakeLocator{"wide": 16}
	p := NewPartitioner()
	first := Split(msgs("wide k1"), loc, p)[0].Shard
	for i := range 20 {
		if got := Split(msgs("wide k1", "wide"), loc, p); got[0].Shard != first && (len(got) < 2 || got[1].Shard != first) {
			t.Fatalf("round %d: key k1 moved off shard %d: %v", i, first, got)
		}
	}
	seen := map[uint32]bool{}
	for i := range 200 {
		seen[p.Partition("wide", fmt.Sprintf("key-%d", i), 16)] = true
	}
	if len(seen) < 12 {
		t.Errorf("200 keys hit %d of 16 partitions, want at least 12", len(seen))
	}
}

func TestMerge(t *testing.T) {
	loc := fakeLocator{"wide": 3}
	in := msgs("wide", "wide", "wide", "wide", "wide", "wide")
	parts := Split(in, loc, NewPartitioner())
	if len(parts) != 3 {
		t.Fatalf("Split gave %d parts, want 3", len(parts))
	}
	failed := &statuspb.Status{Code: int32(codes.Unavailable), Message: "shard 101 has no reachable leader"}
	tests := []struct {
		name    string
		answers []Answer
		want    []string // per request position: message id or "code:<n>"
	}{
		{
			"all ok",
			[]Answer{
				{Results: []*sundialv1.PublishResult{{MessageId: "p0a"}, {MessageId: "p0b"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p1a"}, {MessageId: "p1b"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p2a"}, {MessageId: "p2b"}}},
			},
			[]string{"p0a", "p1a", "p2a", "p0b", "p1b", "p2b"},
		},
		{
			"one part failed",
			[]Answer{
				{Results: []*sundialv1.PublishResult{{MessageId: "p0a"}, {MessageId: "p0b"}}},
				{Err: failed},
				{Results: []*sundialv1.PublishResult{{MessageId: "p2a"}, {MessageId: "p2b"}}},
			},
			[]string{"p0a", "code:14", "p2a", "p0b", "code:14", "p2b"},
		},
		{
			"short answer",
			[]Answer{
				{Results: []*sundialv1.PublishResult{{MessageId: "p0a"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p1a"}, {MessageId: "p1b"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p2a"}, {MessageId: "p2b"}}},
			},
			[]string{"code:13", "p1a", "p2a", "code:13", "p1b", "p2b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Merge(len(in), parts, tc.answers)
			got := make([]string, len(res))
			for i, r := range res {
				if r.GetError() != nil {
					got[i] = fmt.Sprintf("code:%d", r.GetError().GetCode())
				} else {
					got[i] = r.GetMessageId()
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Merge(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
